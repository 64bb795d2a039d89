//! The JSON-RPC envelope and the era rule: any bytes, with any `MCP-Protocol-Version` header,
//! parse to a message or a clean error; nothing panics. The parse without the depth probe
//! (mcp-service's, behind the gateway) reads what the probe accepts alike, and the parse that
//! spares the probe where it cannot fail answers every body as the one that always probes; the
//! outline of a message (what mcp-service reads instead of parsing it again) reads as its parse.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mcp_proto::envelope::{Body, parse_body, parse_body_always_probed, parse_checked_body};

fuzz_target!(|data: &[u8]| {
    // The first byte says how long the header value is; the rest is the body.
    let (header, body) = match data.split_first() {
        Some((&n, rest)) if (n as usize) <= rest.len() => rest.split_at(n as usize),
        _ => (&[][..], data),
    };
    let header = std::str::from_utf8(header).ok();
    let parsed = parse_body(body);
    assert_eq!(format!("{parsed:?}"), format!("{:?}", parse_body_always_probed(body)));
    if let Ok(Body::Single(env)) = &parsed {
        let _ = env.body_era();
        let _ = env.missing_modern_meta();
        let _ = env.name_target();
        let _ = env.id_json();
        let _ = env.meta_version_str();
        let _ = gateway::era::classify(env, header);
        // The outline the gateway sends mcp-service reads as the parse it describes.
        if let Some(outline) = env.outline(body) {
            let read = mcp_proto::envelope::from_outline(body, &outline).expect("an outline fits its body");
            assert_eq!(format!("{read:?}"), format!("{env:?}"));
        }
    }
    // Any outline, the gateway's or not, gives an envelope or none, and an id it gives is one.
    if body.len() >= 57 {
        let outline = mcp_proto::mcp::Outline {
            kind: i32::from(body[0] % 5),
            parts: body[1..57].to_vec().into(),
            meta: body[0] & 0x40 != 0,
            meta_has_capabilities: body[0] & 0x80 != 0,
        };
        if let Some(env) = mcp_proto::envelope::from_outline(body, &outline) {
            assert!(env.id.is_none_or(mcp_proto::envelope::is_valid_id));
            let _ = env.missing_modern_meta();
        }
    }
    // mcp-service's parse of a body the gateway parsed: any bytes, checked or not, give a
    // message or a clean error, and a body the probe accepts reads alike both ways.
    let checked = parse_checked_body(body);
    if let (Ok(Body::Single(a)), Ok(Body::Single(b))) = (&parsed, &checked) {
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
});
