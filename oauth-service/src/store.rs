//! Storage for clients, users, grants, authorisation codes, refresh tokens and consents: SQLite
//! (the embedded default) or PostgreSQL, one schema and one set of queries through sqlx's `Any`
//! driver, migrations embedded and run at start.
//!
//! Codes, refresh tokens and client secrets are stored as SHA-256 hashes only; passwords as
//! argon2 PHC strings. Codes and refresh tokens are redeemed with one conditional `UPDATE … RETURNING`,
//! so a code is single use even across replicas on one PostgreSQL. A second use of a code or of a
//! rotated refresh token reports the grant it belonged to, so that the grant can be revoked.

use std::borrow::Cow;

use sqlx::AnyPool;
use sqlx::Row as _;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migration, MigrationType, Migrator};

const MIGRATIONS: &[(i64, &str, &str)] = &[(1, "initial", include_str!("../migrations/0001_initial.sql"))];

#[derive(Debug, Clone)]
pub struct Client {
    pub client_id: String,
    pub secret_hash: Option<String>,
    pub redirect_uris: Vec<String>,
    pub name: Option<String>,
    pub application_type: String,
    pub auth_method: String,
    pub grant_types: Vec<String>,
    /// How the client came to be: `dynamic`, `admin`, `static` or `metadata-document`.
    pub source: String,
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
    pool: AnyPool,
}

type Result<T> = std::result::Result<T, sqlx::Error>;

const GRANT_COLUMNS: &str = "g.grant_id, g.client_id, g.username, g.scope, g.resource";

fn grant_from(r: &sqlx::any::AnyRow) -> Grant {
    Grant { grant_id: r.get(0), client_id: r.get(1), username: r.get(2), scope: r.get(3), resource: r.get(4) }
}

fn client_from(r: &sqlx::any::AnyRow) -> Client {
    Client {
        client_id: r.get(0),
        secret_hash: r.get(1),
        redirect_uris: serde_json::from_str(&r.get::<String, _>(2)).unwrap_or_default(),
        name: r.get(3),
        application_type: r.get(4),
        auth_method: r.get(5),
        grant_types: serde_json::from_str(&r.get::<String, _>(6)).unwrap_or_default(),
        source: r.get(7),
    }
}

fn insert_client_query(c: &Client, now: i64) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments> {
    sqlx::query(
        "INSERT INTO clients (client_id, secret_hash, redirect_uris, name, application_type, auth_method, \
         grant_types, source, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&c.client_id)
    .bind(&c.secret_hash)
    .bind(serde_json::to_string(&c.redirect_uris).unwrap_or_default())
    .bind(&c.name)
    .bind(&c.application_type)
    .bind(&c.auth_method)
    .bind(serde_json::to_string(&c.grant_types).unwrap_or_default())
    .bind(&c.source)
    .bind(now)
}

fn insert_grant_query(g: &Grant, now: i64) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments> {
    sqlx::query(
        "INSERT INTO grants (grant_id, client_id, username, scope, resource, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&g.grant_id)
    .bind(&g.client_id)
    .bind(&g.username)
    .bind(&g.scope)
    .bind(&g.resource)
    .bind(now)
}

const CLIENT_COLUMNS: &str =
    "client_id, secret_hash, redirect_uris, name, application_type, auth_method, grant_types, source";

impl Store {
    /// Open the database at `url` (`sqlite://PATH`, `sqlite::memory:`, `postgres://…`) and
    /// bring its schema up to date.
    pub async fn open(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let memory = url.starts_with("sqlite:") && url.contains(":memory:");
        let sqlite = url.starts_with("sqlite:");
        let mut options = AnyPoolOptions::new().max_connections(match (memory, sqlite) {
            (true, _) => 1,
            (false, true) => 4,
            (false, false) => 10,
        });
        if !sqlite {
            // While the database is unreachable (restarting, failing over), a request waits this
            // long for a connection and then fails with 503 instead of hanging for sqlx's 30 s.
            options = options.acquire_timeout(std::time::Duration::from_secs(3));
        }
        if memory {
            // One connection that never closes: it is the whole database.
            options = options.min_connections(1).idle_timeout(None).max_lifetime(None);
        }
        let url = if sqlite && !memory && !url.contains("mode=") {
            format!("{url}{}mode=rwc", if url.contains('?') { '&' } else { '?' })
        } else {
            url.to_owned()
        };
        let pool = options.connect(&url).await?;
        let migrations: Vec<Migration> = MIGRATIONS
            .iter()
            .map(|(version, name, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*name),
                    MigrationType::Simple,
                    sqlx::SqlStr::from_static(sql),
                    false,
                )
            })
            .collect();
        let migrator = Migrator { migrations: Cow::Owned(migrations), ..Migrator::DEFAULT };
        migrator.run(&pool).await.map_err(|e| sqlx::Error::Configuration(format!("migration: {e}").into()))?;
        Ok(Self { pool })
    }

    // ---- clients ----

    pub async fn insert_client(&self, c: &Client, now: i64) -> Result<()> {
        insert_client_query(c, now).execute(&self.pool).await?;
        Ok(())
    }

    /// Insert or replace a client (static clients from configuration).
    pub async fn upsert_client(&self, c: &Client, now: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM clients WHERE client_id = $1").bind(&c.client_id).execute(&mut *tx).await?;
        insert_client_query(c, now).execute(&mut *tx).await?;
        tx.commit().await
    }

    pub async fn client(&self, client_id: &str) -> Result<Option<Client>> {
        let row =
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {CLIENT_COLUMNS} FROM clients WHERE client_id = $1")))
                .bind(client_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.as_ref().map(client_from))
    }

    pub async fn clients(&self) -> Result<Vec<Client>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {CLIENT_COLUMNS} FROM clients ORDER BY created_at, client_id"
        )))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(client_from).collect())
    }

    /// Remove a client and everything it was granted. Whether it existed.
    pub async fn remove_client(&self, client_id: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE grants SET revoked = 1 WHERE client_id = $1").bind(client_id).execute(&mut *tx).await?;
        sqlx::query("DELETE FROM consents WHERE client_id = $1").bind(client_id).execute(&mut *tx).await?;
        let gone = sqlx::query("DELETE FROM clients WHERE client_id = $1").bind(client_id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(gone.rows_affected() > 0)
    }

    // ---- users ----

    pub async fn upsert_user(&self, username: &str, password_hash: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO users (username, password_hash, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (username) DO UPDATE SET password_hash = excluded.password_hash",
        )
        .bind(username)
        .bind(password_hash)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn password_hash(&self, username: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT password_hash FROM users WHERE username = $1")
            .bind(username)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    pub async fn users(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT username FROM users ORDER BY username").fetch_all(&self.pool).await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Remove a user, revoking every grant they gave. Whether they existed.
    pub async fn remove_user(&self, username: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE grants SET revoked = 1 WHERE username = $1").bind(username).execute(&mut *tx).await?;
        sqlx::query("DELETE FROM consents WHERE username = $1").bind(username).execute(&mut *tx).await?;
        let gone = sqlx::query("DELETE FROM users WHERE username = $1").bind(username).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(gone.rows_affected() > 0)
    }

    // ---- grants, codes, refresh tokens ----

    pub async fn insert_grant(&self, g: &Grant, now: i64) -> Result<()> {
        insert_grant_query(g, now).execute(&self.pool).await?;
        Ok(())
    }

    /// A grant, revoked or not (for what was redeemed a moment ago).
    pub async fn grant(&self, grant_id: &str) -> Result<Option<Grant>> {
        let row =
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {GRANT_COLUMNS} FROM grants g WHERE g.grant_id = $1")))
                .bind(grant_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.as_ref().map(grant_from))
    }

    /// A grant that is not revoked.
    pub async fn live_grant(&self, grant_id: &str) -> Result<Option<Grant>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {GRANT_COLUMNS} FROM grants g WHERE g.grant_id = $1 AND g.revoked = 0"
        )))
        .bind(grant_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(grant_from))
    }

    /// Store a code for a grant that is stored with it, in one transaction.
    pub async fn insert_code(&self, code_hash: &str, code: &Code, now: i64) -> Result<()> {
        let g = &code.grant;
        let mut tx = self.pool.begin().await?;
        insert_grant_query(g, now).execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO codes (code_hash, grant_id, redirect_uri, challenge, expires_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(code_hash)
        .bind(&g.grant_id)
        .bind(&code.redirect_uri)
        .bind(&code.challenge)
        .bind(code.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    /// Use a code once. The code is spent and its grant read in one statement, so that of two
    /// concurrent redemptions (on any replicas) exactly one gets the grant.
    pub async fn redeem_code(&self, code_hash: &str) -> Result<Redeemed<Code>> {
        let row = sqlx::query(
            "UPDATE codes SET used = 1 WHERE code_hash = $1 AND used = 0 \
             AND EXISTS (SELECT 1 FROM grants g WHERE g.grant_id = codes.grant_id AND g.revoked = 0) \
             RETURNING grant_id, redirect_uri, challenge, expires_at",
        )
        .bind(code_hash)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = row {
            let grant_id: String = r.get(0);
            let Some(grant) = self.grant(&grant_id).await? else { return Ok(Redeemed::Unknown) };
            return Ok(Redeemed::Valid(Code {
                grant,
                redirect_uri: r.get(1),
                challenge: r.get(2),
                expires_at: r.get(3),
            }));
        }
        let used = sqlx::query("SELECT grant_id, used FROM codes WHERE code_hash = $1")
            .bind(code_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match used {
            Some(r) if r.get::<i64, _>(1) != 0 => Redeemed::Replayed(r.get(0)),
            _ => Redeemed::Unknown,
        })
    }

    /// Store a grant's new refresh token. This completes the rotation of the token it replaces:
    /// only now, in the same transaction, does the used token count as rotated (state 1).
    pub async fn insert_refresh(&self, token_hash: &str, grant_id: &str, expires_at: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO refresh_tokens (token_hash, grant_id, expires_at) VALUES ($1, $2, $3)")
            .bind(token_hash)
            .bind(grant_id)
            .bind(expires_at)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE refresh_tokens SET state = 1 WHERE grant_id = $1 AND state = 2")
            .bind(grant_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Use a refresh token once (rotation). A token rotated less than `grace` seconds ago is
    /// honoured again — a client that sent it twice at once — without revoking anything; later
    /// it counts as replayed.
    ///
    /// States: 0 live; 2 used, its successor not stored yet (still usable: when storing the
    /// successor fails, e.g. the database went away, the client's retry with the same token
    /// must not look like a replay); 1 rotated, set by [`Store::insert_refresh`] with the
    /// successor.
    pub async fn redeem_refresh(&self, token_hash: &str, now: i64, grace: i64) -> Result<Redeemed<Grant>> {
        let row = sqlx::query(
            "UPDATE refresh_tokens SET state = 2, rotated_at = $2 WHERE token_hash = $1 AND state IN (0, 2) \
             AND expires_at > $2 \
             AND EXISTS (SELECT 1 FROM grants g WHERE g.grant_id = refresh_tokens.grant_id AND g.revoked = 0) \
             RETURNING grant_id",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = row {
            let grant_id: String = r.get(0);
            return Ok(self.grant(&grant_id).await?.map_or(Redeemed::Unknown, Redeemed::Valid));
        }
        let seen = sqlx::query("SELECT grant_id, state, rotated_at FROM refresh_tokens WHERE token_hash = $1")
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await?;
        let Some(r) = seen else { return Ok(Redeemed::Unknown) };
        let (grant_id, state, rotated_at): (String, i64, Option<i64>) = (r.get(0), r.get(1), r.get(2));
        if state != 1 {
            return Ok(Redeemed::Unknown); // expired, or its grant is revoked
        }
        if rotated_at.is_some_and(|at| now - at < grace) {
            return Ok(self.live_grant(&grant_id).await?.map_or(Redeemed::Unknown, Redeemed::Valid));
        }
        Ok(Redeemed::Replayed(grant_id))
    }

    /// The live grant a refresh token belongs to (revocation, introspection), without using it.
    pub async fn refresh_grant(&self, token_hash: &str, now: i64) -> Result<Option<Grant>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {GRANT_COLUMNS} FROM refresh_tokens t JOIN grants g ON g.grant_id = t.grant_id \
             WHERE t.token_hash = $1 AND t.state <> 1 AND t.expires_at > $2 AND g.revoked = 0"
        )))
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(grant_from))
    }

    /// Revoke a grant: its refresh tokens and the access tokens issued from it stop working.
    pub async fn revoke_grant(&self, grant_id: &str) -> Result<()> {
        sqlx::query("UPDATE grants SET revoked = 1 WHERE grant_id = $1").bind(grant_id).execute(&self.pool).await?;
        Ok(())
    }

    pub async fn grant_revoked(&self, grant_id: &str) -> Result<bool> {
        let row = sqlx::query("SELECT revoked FROM grants WHERE grant_id = $1")
            .bind(grant_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_none_or(|r| r.get::<i64, _>(0) != 0))
    }

    /// Revoke one access token by its JWT id until it would have expired anyway.
    pub async fn revoke_jti(&self, jti: &str, expires_at: i64) -> Result<()> {
        sqlx::query("INSERT INTO revoked_tokens (jti, expires_at) VALUES ($1, $2) ON CONFLICT (jti) DO NOTHING")
            .bind(jti)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn jti_revoked(&self, jti: &str) -> Result<bool> {
        let row =
            sqlx::query("SELECT 1 FROM revoked_tokens WHERE jti = $1").bind(jti).fetch_optional(&self.pool).await?;
        Ok(row.is_some())
    }

    /// Drop what can no longer be used: expired codes, refresh tokens and revocations.
    pub async fn sweep(&self, now: i64) -> Result<()> {
        sqlx::query("DELETE FROM codes WHERE expires_at < $1").bind(now - 3600).execute(&self.pool).await?;
        sqlx::query("DELETE FROM refresh_tokens WHERE expires_at < $1").bind(now).execute(&self.pool).await?;
        sqlx::query("DELETE FROM revoked_tokens WHERE expires_at < $1").bind(now).execute(&self.pool).await?;
        Ok(())
    }

    // ---- consent ----

    pub async fn has_consent(&self, username: &str, client_id: &str, scope: &str) -> Result<bool> {
        let row = sqlx::query("SELECT 1 FROM consents WHERE username = $1 AND client_id = $2 AND scope = $3")
            .bind(username)
            .bind(client_id)
            .bind(scope)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    pub async fn add_consent(&self, username: &str, client_id: &str, scope: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO consents (username, client_id, scope, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (username, client_id, scope) DO NOTHING",
        )
        .bind(username)
        .bind(client_id)
        .bind(scope)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A user's remembered consents: (client id, scope).
    pub async fn consents(&self, username: &str) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query("SELECT client_id, scope FROM consents WHERE username = $1 ORDER BY client_id, scope")
            .bind(username)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Forget what a user allowed a client, and revoke the grants it holds from them.
    pub async fn revoke_consent(&self, username: &str, client_id: &str) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let gone = sqlx::query("DELETE FROM consents WHERE username = $1 AND client_id = $2")
            .bind(username)
            .bind(client_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE grants SET revoked = 1 WHERE username = $1 AND client_id = $2")
            .bind(username)
            .bind(client_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(id: &str) -> Grant {
        Grant {
            grant_id: id.into(),
            client_id: "c".into(),
            username: "u".into(),
            scope: "mcp".into(),
            resource: "https://r/mcp".into(),
        }
    }

    #[tokio::test]
    async fn codes_are_single_use_and_refresh_tokens_rotate_with_a_grace() {
        let store = Store::open("sqlite::memory:").await.expect("open");
        let code = Code { grant: grant("g1"), redirect_uri: "r".into(), challenge: "c".into(), expires_at: 100 };
        store.insert_code("h1", &code, 0).await.expect("insert");
        assert!(matches!(store.redeem_code("h1").await.expect("redeem"), Redeemed::Valid(_)));
        assert!(matches!(store.redeem_code("h1").await.expect("redeem"), Redeemed::Replayed(g) if g == "g1"));
        assert!(matches!(store.redeem_code("nope").await.expect("redeem"), Redeemed::Unknown));

        store.insert_refresh("r1", "g1", 1000).await.expect("insert");
        assert!(matches!(store.redeem_refresh("r1", 10, 5).await.expect("use"), Redeemed::Valid(_)));
        // Its successor was never stored (the database went away): the same token, retried
        // past the grace, is still the grant's current one.
        assert!(matches!(store.redeem_refresh("r1", 30, 5).await.expect("use"), Redeemed::Valid(_)));
        store.insert_refresh("r1b", "g1", 1000).await.expect("successor");
        // Again within the grace: honoured.
        assert!(matches!(store.redeem_refresh("r1", 32, 5).await.expect("use"), Redeemed::Valid(_)));
        store.insert_refresh("r1c", "g1", 1000).await.expect("successor");
        // After it, with a successor stored: a replay.
        assert!(matches!(store.redeem_refresh("r1", 40, 5).await.expect("use"), Redeemed::Replayed(_)));
        store.revoke_grant("g1").await.expect("revoke");
        store.insert_refresh("r2", "g1", 1000).await.expect("insert");
        assert!(matches!(store.redeem_refresh("r2", 30, 5).await.expect("use"), Redeemed::Unknown));
        assert!(store.grant_revoked("g1").await.expect("lookup"));
    }

    #[tokio::test]
    async fn migrations_run_once_on_a_file_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("oauth.db").display());
        let a = Store::open(&url).await.expect("first open");
        a.upsert_user("u", "hash", 0).await.expect("user");
        drop(a);
        let b = Store::open(&url).await.expect("second open");
        assert_eq!(b.users().await.expect("users"), vec!["u".to_owned()]);
    }
}
