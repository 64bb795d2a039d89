//! The `Mcp-Name` header codec (plain ASCII or the Base64 sentinel form): any bytes decode to a
//! string or a clean error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = mcp_proto::header_codec::decode(data) {
        assert!(text.len() <= data.len() * 3 + 16);
    }
});
