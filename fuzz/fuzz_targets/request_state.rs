//! Sealed `requestState`: nothing but what the server sealed opens; what it sealed opens again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mcp_service::seal::Sealer;

fuzz_target!(|data: &[u8]| {
    let sealer = Sealer::new(b"a fixed fuzzing key of thirty-two bytes or more!");
    if let Ok(token) = std::str::from_utf8(data) {
        assert!(sealer.open::<serde_json::Value>("requestState", token).is_err(), "forged state opened");
    }
    let value = serde_json::Value::String(String::from_utf8_lossy(data).into_owned());
    let sealed = sealer.seal("requestState", &value);
    assert_eq!(sealer.open::<serde_json::Value>("requestState", &sealed).ok(), Some(value));
    assert!(sealer.open::<serde_json::Value>("session", &sealed).is_err(), "a seal is bound to its purpose");
});
