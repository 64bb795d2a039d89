//! Redirect URI rules of the authorisation server: registration checks and the exact-match
//! (loopback any-port) comparison never panic, and a URI matches itself when registered.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (requested, registered) = text.split_once('\n').unwrap_or((text, ""));
    let registered: Vec<String> = registered.lines().map(str::to_owned).collect();
    let _ = oauth_service::authorize::redirect_registered(requested, &registered);
    for kind in ["web", "native"] {
        let _ = oauth_service::registration::redirect_allowed(requested, kind);
    }
    if !requested.is_empty() {
        assert!(oauth_service::authorize::redirect_registered(requested, &[requested.to_owned()]));
    }
});
