//! An OAuth client for tests: registration, the authorisation request with PKCE, the sign-in
//! form as a browser would submit it, and the token endpoint. Redirects are never followed, so
//! tests see every `Location`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// A PKCE verifier and its S256 challenge.
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

impl Pkce {
    pub fn new() -> Self {
        let mut bytes = [0u8; 32];
        rand_bytes(&mut bytes);
        let verifier = URL_SAFE_NO_PAD.encode(bytes);
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Self { verifier, challenge }
    }
}

impl Default for Pkce {
    fn default() -> Self {
        Self::new()
    }
}

/// Test randomness without another dependency: hash the clock and a counter.
fn rand_bytes(out: &mut [u8; 32]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let digest = Sha256::digest(format!("{nanos}:{n}:{}", std::process::id()).as_bytes());
    out.copy_from_slice(&digest);
}

/// What came back from an HTTP call.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    /// The query parameters of the `Location` this answer redirects to.
    pub fn location_params(&self) -> std::collections::HashMap<String, String> {
        let location = self.header("location");
        let url =
            url::Url::parse(location).unwrap_or_else(|_| panic!("not a redirect ({}): {}", self.status, self.text));
        url.query_pairs().into_owned().collect()
    }

    /// The value of a hidden form field on an HTML page.
    pub fn hidden(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.text.find(&marker)? + marker.len();
        let end = self.text[start..].find('"')? + start;
        Some(html_unescape(&self.text[start..end]))
    }
}

fn html_unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#x2f;", "/")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Every `<input type="hidden" name=".." value="..">` of a page, in order.
pub fn hidden_fields(html: &str) -> Vec<(String, String)> {
    const START: &str = "<input type=\"hidden\" name=\"";
    let mut fields = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(START) {
        rest = &rest[i + START.len()..];
        let Some((name, after)) = rest.split_once("\" value=\"") else { break };
        let Some((value, after)) = after.split_once('"') else { break };
        fields.push((html_unescape(name), html_unescape(value)));
        rest = after;
    }
    fields
}

/// A client of the authorisation server at `base` (the gateway's origin).
pub struct OAuth {
    pub base: String,
    /// The MCP resource asked for: `{base}/mcp` unless set.
    pub resource: String,
    pub http: reqwest::Client,
}

impl OAuth {
    pub fn new(base: &str) -> Self {
        crate::http();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(20))
            .build()
            .expect("HTTP client");
        let base = base.trim_end_matches('/').to_owned();
        Self { resource: format!("{base}/mcp"), base, http }
    }

    async fn answer(resp: reqwest::Response) -> Answer {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer { status, headers, text, json }
    }

    pub async fn get(&self, path_or_url: &str) -> Answer {
        let url = if path_or_url.starts_with("http") {
            path_or_url.to_owned()
        } else {
            format!("{}{path_or_url}", self.base)
        };
        Self::answer(self.http.get(url).send().await.expect("GET")).await
    }

    /// Dynamic client registration.
    pub async fn register(&self, metadata: &Value) -> Answer {
        let resp = self.http.post(format!("{}/oauth/register", self.base)).json(metadata).send().await.expect("POST");
        Self::answer(resp).await
    }

    /// A public native client with a loopback redirect; its id.
    pub async fn register_public(&self, redirect_uri: &str) -> String {
        let reg = self
            .register(&json!({
                "client_name": "e2e client",
                "redirect_uris": [redirect_uri],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "application_type": "native",
            }))
            .await;
        assert_eq!(reg.status, 201, "{}", reg.text);
        reg.json["client_id"].as_str().expect("client_id").to_owned()
    }

    /// GET the authorisation endpoint with `params`.
    pub async fn authorize(&self, params: &[(&str, &str)]) -> Answer {
        let resp = self.http.get(format!("{}/oauth/authorize", self.base)).query(params).send().await.expect("GET");
        Self::answer(resp).await
    }

    /// Submit the sign-in page's form as a browser would: its hidden fields, plus `fields`.
    pub async fn submit(&self, page: &Answer, fields: &[(&str, &str)]) -> Answer {
        let mut form = hidden_fields(&page.text);
        for (k, v) in fields {
            form.retain(|(name, _)| name != k);
            form.push(((*k).to_owned(), (*v).to_owned()));
        }
        let resp = self.http.post(format!("{}/oauth/authorize", self.base)).form(&form).send().await.expect("POST");
        Self::answer(resp).await
    }

    /// POST the token endpoint.
    pub async fn token(&self, form: &[(&str, &str)]) -> Answer {
        let resp = self.http.post(format!("{}/oauth/token", self.base)).form(form).send().await.expect("POST");
        Self::answer(resp).await
    }

    /// The whole sign-in for a public client, asking for scope `mcp`: the code's redirect
    /// parameters.
    pub async fn sign_in(
        &self,
        client_id: &str,
        redirect_uri: &str,
        pkce: &Pkce,
        user: (&str, &str),
    ) -> std::collections::HashMap<String, String> {
        self.sign_in_scoped(client_id, redirect_uri, pkce, user, "mcp").await
    }

    /// The whole sign-in asking for `scope`.
    pub async fn sign_in_scoped(
        &self,
        client_id: &str,
        redirect_uri: &str,
        pkce: &Pkce,
        user: (&str, &str),
        scope: &str,
    ) -> std::collections::HashMap<String, String> {
        let resource = self.resource.clone();
        let page = self
            .authorize(&[
                ("response_type", "code"),
                ("client_id", client_id),
                ("redirect_uri", redirect_uri),
                ("code_challenge", &pkce.challenge),
                ("code_challenge_method", "S256"),
                ("state", "st-123"),
                ("scope", scope),
                ("resource", &resource),
            ])
            .await;
        assert_eq!(page.status, 200, "{}", page.text);
        let done = self.submit(&page, &[("username", user.0), ("password", user.1), ("decision", "allow")]).await;
        assert_eq!(done.status, 303, "{}", done.text);
        done.location_params()
    }

    /// Exchange a code for tokens.
    pub async fn exchange(&self, client_id: &str, redirect_uri: &str, code: &str, verifier: &str) -> Answer {
        let resource = self.resource.clone();
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
            ("client_id", client_id),
            ("resource", &resource),
        ])
        .await
    }
}
