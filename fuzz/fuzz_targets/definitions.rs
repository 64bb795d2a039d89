//! The definitions file loader: any text is a catalog or a list of mistakes with places;
//! nothing panics, nothing is half-loaded.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let base = std::env::temp_dir().join("mcp-fuzz-definitions-empty");
        match registry_service::definitions::load_str(text, &base, "fuzz.yaml") {
            Ok(_) => {}
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
});
