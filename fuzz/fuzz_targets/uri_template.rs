//! RFC 6570 template matching: any template and URI match or not; matched variables come from
//! the URI.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (template, uri) = text.split_once('\n').unwrap_or((text, ""));
    if let Some(vars) = registry_service::catalog::match_template(template, uri) {
        for value in vars.values() {
            assert!(value.len() <= uri.len());
        }
    }
});
