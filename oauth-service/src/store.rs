//! Storage for clients, users, authorisation codes and refresh tokens (SQLite).
//!
//! Codes, refresh tokens and client secrets are stored as SHA-256 hashes only; passwords as
//! argon2 PHC strings. Codes are single use: a second use of one reports the grant it belonged
//! to, so that every token of that grant can be revoked.

use std::str::FromStr as _;

use sqlx::Row as _;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS clients (
    client_id TEXT PRIMARY KEY,
    secret_hash TEXT,
    redirect_uris TEXT NOT NULL,
    name TEXT,
    application_type TEXT NOT NULL,
    auth_method TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS users (
    username TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS codes (
    code_hash TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    username TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    challenge TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    used INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS refresh_tokens (
    token_hash TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    username TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
);
";

#[derive(Debug, Clone)]
pub struct Client {
    pub client_id: String,
    pub secret_hash: Option<String>,
    pub redirect_uris: Vec<String>,
    pub name: Option<String>,
    pub application_type: String,
    pub auth_method: String,
}

/// What a code or refresh token grants.
#[derive(Debug, Clone)]
pub struct Grant {
    pub grant_id: String,
    pub client_id: String,
    pub username: String,
    pub scope: String,
    pub resource: String,
}

#[derive(Debug, Clone)]
pub struct Code {
    pub grant: Grant,
    pub redirect_uri: String,
    pub challenge: String,
    pub expires_at: i64,
}

/// The outcome of redeeming a single-use secret.
pub enum Redeemed<T> {
    Valid(T),
    /// It was used before: the grant it belongs to.
    Replayed(String),
    Unknown,
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

type Result<T> = std::result::Result<T, sqlx::Error>;

impl Store {
    /// Open (creating if needed) the database at `url` (`sqlite://…`; `sqlite::memory:` for a
    /// process-local store).
    pub async fn open(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?.create_if_missing(true);
        let memory = url.contains(":memory:");
        let pool = SqlitePoolOptions::new().max_connections(if memory { 1 } else { 5 }).connect_with(options).await?;
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        Ok(Self { pool })
    }

    pub async fn insert_client(&self, c: &Client, now: i64) -> Result<()> {
        sqlx::query("INSERT INTO clients VALUES (?, ?, ?, ?, ?, ?, ?)")
            .bind(&c.client_id)
            .bind(&c.secret_hash)
            .bind(serde_json::to_string(&c.redirect_uris).unwrap_or_default())
            .bind(&c.name)
            .bind(&c.application_type)
            .bind(&c.auth_method)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn client(&self, client_id: &str) -> Result<Option<Client>> {
        let row = sqlx::query("SELECT client_id, secret_hash, redirect_uris, name, application_type, auth_method FROM clients WHERE client_id = ?")
            .bind(client_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| Client {
            client_id: r.get(0),
            secret_hash: r.get(1),
            redirect_uris: serde_json::from_str(&r.get::<String, _>(2)).unwrap_or_default(),
            name: r.get(3),
            application_type: r.get(4),
            auth_method: r.get(5),
        }))
    }

    pub async fn upsert_user(&self, username: &str, password_hash: &str) -> Result<()> {
        sqlx::query("INSERT INTO users VALUES (?, ?) ON CONFLICT(username) DO UPDATE SET password_hash = excluded.password_hash")
            .bind(username)
            .bind(password_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn password_hash(&self, username: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT password_hash FROM users WHERE username = ?")
            .bind(username)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn insert_code(&self, code_hash: &str, code: &Code) -> Result<()> {
        let g = &code.grant;
        sqlx::query("INSERT INTO codes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)")
            .bind(code_hash)
            .bind(&g.grant_id)
            .bind(&g.client_id)
            .bind(&g.username)
            .bind(&code.redirect_uri)
            .bind(&code.challenge)
            .bind(&g.scope)
            .bind(&g.resource)
            .bind(code.expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Use a code once.
    pub async fn redeem_code(&self, code_hash: &str) -> Result<Redeemed<Code>> {
        let row = sqlx::query(
            "UPDATE codes SET used = 1 WHERE code_hash = ? AND used = 0 \
             RETURNING grant_id, client_id, username, redirect_uri, challenge, scope, resource, expires_at",
        )
        .bind(code_hash)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = row {
            return Ok(Redeemed::Valid(Code {
                grant: Grant {
                    grant_id: r.get(0),
                    client_id: r.get(1),
                    username: r.get(2),
                    scope: r.get(5),
                    resource: r.get(6),
                },
                redirect_uri: r.get(3),
                challenge: r.get(4),
                expires_at: r.get(7),
            }));
        }
        let used = sqlx::query("SELECT grant_id FROM codes WHERE code_hash = ?")
            .bind(code_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(used.map_or(Redeemed::Unknown, |r| Redeemed::Replayed(r.get(0))))
    }

    pub async fn insert_refresh(&self, token_hash: &str, grant: &Grant, expires_at: i64) -> Result<()> {
        sqlx::query("INSERT INTO refresh_tokens VALUES (?, ?, ?, ?, ?, ?, ?, 0)")
            .bind(token_hash)
            .bind(&grant.grant_id)
            .bind(&grant.client_id)
            .bind(&grant.username)
            .bind(&grant.scope)
            .bind(&grant.resource)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Use a refresh token once (rotation): it is revoked as it is redeemed.
    pub async fn redeem_refresh(&self, token_hash: &str, now: i64) -> Result<Redeemed<Grant>> {
        let row = sqlx::query(
            "UPDATE refresh_tokens SET revoked = 1 WHERE token_hash = ? AND revoked = 0 AND expires_at > ? \
             RETURNING grant_id, client_id, username, scope, resource",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = row {
            return Ok(Redeemed::Valid(Grant {
                grant_id: r.get(0),
                client_id: r.get(1),
                username: r.get(2),
                scope: r.get(3),
                resource: r.get(4),
            }));
        }
        let seen = sqlx::query("SELECT grant_id, revoked FROM refresh_tokens WHERE token_hash = ?")
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match seen {
            Some(r) if r.get::<i64, _>(1) == 1 => Redeemed::Replayed(r.get(0)),
            _ => Redeemed::Unknown,
        })
    }

    /// Revoke every refresh token of a grant (a replayed code or refresh token).
    pub async fn revoke_grant(&self, grant_id: &str) -> Result<()> {
        sqlx::query("UPDATE refresh_tokens SET revoked = 1 WHERE grant_id = ?")
            .bind(grant_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
