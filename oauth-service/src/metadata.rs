//! RFC 8414 authorisation server metadata. `issuer` is byte-for-byte the configured issuer.

use serde_json::{Value, json};

use crate::config::Config;

/// A grant type as a bounded metrics label.
pub fn grant_type_label(grant_type: &str) -> &'static str {
    match grant_type {
        "authorization_code" => "authorization_code",
        "refresh_token" => "refresh_token",
        "client_credentials" => "client_credentials",
        _ => "other",
    }
}

pub fn document(config: &Config) -> Value {
    let base = config.issuer_base();
    let mut doc = json!({
        "issuer": config.issuer.as_str().trim_end_matches('/'),
        "authorization_endpoint": format!("{base}/oauth/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "jwks_uri": format!("{base}/oauth/jwks"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "introspection_endpoint": format!("{base}/oauth/introspect"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
        "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "client_id_metadata_document_supported": config.client_metadata_documents,
        "authorization_response_iss_parameter_supported": true,
        "scopes_supported": config.scopes,
    });
    if config.registration {
        doc["registration_endpoint"] = json!(format!("{base}/oauth/register"));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_and_endpoints_agree() {
        let config =
            Config { issuer: url::Url::parse("https://auth.example.com/tenant/").expect("url"), ..Config::default() };
        let doc = document(&config);
        assert_eq!(doc["issuer"], "https://auth.example.com/tenant");
        assert_eq!(doc["token_endpoint"], "https://auth.example.com/tenant/oauth/token");
        assert_eq!(doc["code_challenge_methods_supported"], json!(["S256"]));
    }
}
