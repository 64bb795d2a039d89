-- oauth-service storage, the same for SQLite and PostgreSQL. Secrets are stored as SHA-256
-- hashes (codes, refresh tokens, client secrets) or argon2 PHC strings (passwords).
CREATE TABLE clients (
    client_id TEXT PRIMARY KEY,
    secret_hash TEXT,
    redirect_uris TEXT NOT NULL,
    name TEXT,
    application_type TEXT NOT NULL,
    auth_method TEXT NOT NULL,
    grant_types TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE users (
    username TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE grants (
    grant_id TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    username TEXT NOT NULL,
    scope TEXT NOT NULL,
    resource TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE codes (
    code_hash TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    challenge TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    used BIGINT NOT NULL DEFAULT 0
);
-- state: 0 live, 1 rotated (a successor was issued at rotated_at).
CREATE TABLE refresh_tokens (
    token_hash TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    state BIGINT NOT NULL DEFAULT 0,
    rotated_at BIGINT
);
CREATE INDEX refresh_tokens_grant ON refresh_tokens (grant_id);
-- Access tokens revoked before they expire (RFC 7009), by JWT id.
CREATE TABLE revoked_tokens (
    jti TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
-- What a user allowed a client, so the consent page is not shown again for the same scopes.
CREATE TABLE consents (
    username TEXT NOT NULL,
    client_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (username, client_id, scope)
);
