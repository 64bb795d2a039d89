//! The operator's commands, run against the same database and data directory as the server
//! (a running server picks up their effect: users, clients and consents are read per request,
//! keys every few seconds).
//!
//! ```text
//! oauth-service user add NAME --password-stdin | user list | user remove NAME
//! oauth-service client add --name N --redirect-uri URI [--confidential] | client list | client remove ID
//! oauth-service consent list USER | consent revoke USER CLIENT_ID
//! oauth-service keys rotate
//! oauth-service hash-secret            (reads a secret on stdin, prints its stored form)
//! ```

use std::io::Read as _;

use crate::config::Config;
use crate::store::{Client, Store};
use crate::{keys, secrets};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Users who can sign in.
    #[command(subcommand)]
    User(UserCommand),
    /// Registered clients.
    #[command(subcommand)]
    Client(ClientCommand),
    /// What users allowed clients.
    #[command(subcommand)]
    Consent(ConsentCommand),
    /// The token signing keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Read a secret on stdin and print the hash to put in configuration (static clients).
    HashSecret,
}

#[derive(Debug, clap::Subcommand)]
pub enum UserCommand {
    /// Add a user, or set the password of an existing one.
    Add {
        name: String,
        /// Read the password from standard input (one line).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    List,
    /// Remove a user and revoke everything they granted.
    Remove {
        name: String,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Register a client; prints its id, and its secret once.
    Add {
        #[arg(long)]
        name: String,
        #[arg(long = "redirect-uri")]
        redirect_uris: Vec<String>,
        /// A confidential client, with a secret.
        #[arg(long)]
        confidential: bool,
        /// `web` or `native`.
        #[arg(long, default_value = "web")]
        application_type: String,
    },
    List,
    /// Remove a client and revoke its grants.
    Remove {
        /// Taken as it is even when it begins with `-` (ids are random Base64url: one in 64 does).
        #[arg(allow_hyphen_values = true)]
        client_id: String,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ConsentCommand {
    List {
        user: String,
    },
    /// Forget a consent and revoke the grants that came with it.
    Revoke {
        user: String,
        /// Taken as it is even when it begins with `-`.
        #[arg(allow_hyphen_values = true)]
        client_id: String,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Start signing with a new key; the old one stays published until its tokens expire.
    Rotate,
}

/// Run a command; the text to print.
pub async fn run(command: Command, config: &Config) -> Result<String, String> {
    match command {
        Command::HashSecret => Ok(secrets::hash(read_line()?.as_str())),
        Command::Keys(KeysCommand::Rotate) => {
            let dir = config.data_dir.as_deref().ok_or("keys rotate needs --data-dir (or OAUTH_DATA_DIR)")?;
            let kid = keys::rotate(dir, config.access_token_ttl_secs)?;
            Ok(format!("now signing with key {kid}"))
        }
        Command::User(c) => user(c, &open(config).await?).await,
        Command::Client(c) => client(c, &open(config).await?).await,
        Command::Consent(c) => consent(c, &open(config).await?).await,
    }
}

async fn open(config: &Config) -> Result<Store, String> {
    Store::open(&config.database_url()).await.map_err(|e| format!("database: {e}"))
}

fn read_line() -> Result<String, String> {
    let mut input = String::new();
    std::io::stdin().take(64 * 1024).read_to_string(&mut input).map_err(|e| format!("stdin: {e}"))?;
    let line = input.lines().next().unwrap_or_default().to_owned();
    if line.is_empty() {
        return Err("nothing on standard input".into());
    }
    Ok(line)
}

async fn user(c: UserCommand, store: &Store) -> Result<String, String> {
    match c {
        UserCommand::Add { name, .. } => {
            if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
                return Err("a user name is 1 to 200 printable characters".into());
            }
            let password = read_line()?;
            if password.len() < 8 {
                return Err("the password must have at least 8 characters".into());
            }
            let hash = crate::hash_password(&password)?;
            store.upsert_user(&name, &hash, secrets::now()).await.map_err(|e| e.to_string())?;
            Ok(format!("user {name} saved"))
        }
        UserCommand::List => Ok(store.users().await.map_err(|e| e.to_string())?.join("\n")),
        UserCommand::Remove { name } => match store.remove_user(&name).await.map_err(|e| e.to_string())? {
            true => Ok(format!("user {name} removed")),
            false => Err(format!("no user {name}")),
        },
    }
}

async fn client(c: ClientCommand, store: &Store) -> Result<String, String> {
    match c {
        ClientCommand::Add { name, redirect_uris, confidential, application_type } => {
            if application_type != "web" && application_type != "native" {
                return Err("--application-type: web or native".into());
            }
            if redirect_uris.is_empty() && !confidential {
                return Err("a public client needs at least one --redirect-uri".into());
            }
            for uri in &redirect_uris {
                crate::registration::redirect_allowed(uri, &application_type)?;
            }
            let secret = confidential.then(secrets::random);
            let mut grant_types = Vec::new();
            if !redirect_uris.is_empty() {
                grant_types.extend(["authorization_code".to_owned(), "refresh_token".to_owned()]);
            }
            if confidential {
                grant_types.push("client_credentials".to_owned());
            }
            let client = Client {
                client_id: secrets::random(),
                secret_hash: secret.as_deref().map(secrets::hash),
                redirect_uris,
                name: Some(name),
                application_type,
                auth_method: if confidential { "client_secret_basic" } else { "none" }.to_owned(),
                grant_types,
                source: "admin".to_owned(),
            };
            store.insert_client(&client, secrets::now()).await.map_err(|e| e.to_string())?;
            let mut out = format!("client_id: {}", client.client_id);
            if let Some(secret) = secret {
                out.push_str(&format!("\nclient_secret: {secret}\n(the secret is shown once; only its hash is kept)"));
            }
            Ok(out)
        }
        ClientCommand::List => {
            let clients = store.clients().await.map_err(|e| e.to_string())?;
            Ok(clients
                .iter()
                .map(|c| {
                    format!(
                        "{}\t{}\t{}\t{}\t{}",
                        c.client_id,
                        c.name.as_deref().unwrap_or("-"),
                        c.source,
                        if c.secret_hash.is_some() { "confidential" } else { "public" },
                        c.redirect_uris.join(" ")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"))
        }
        ClientCommand::Remove { client_id } => {
            match store.remove_client(&client_id).await.map_err(|e| e.to_string())? {
                true => Ok(format!("client {client_id} removed")),
                false => Err(format!("no client {client_id}")),
            }
        }
    }
}

async fn consent(c: ConsentCommand, store: &Store) -> Result<String, String> {
    match c {
        ConsentCommand::List { user } => {
            let rows = store.consents(&user).await.map_err(|e| e.to_string())?;
            Ok(rows.iter().map(|(client, scope)| format!("{client}\t{scope}")).collect::<Vec<_>>().join("\n"))
        }
        ConsentCommand::Revoke { user, client_id } => {
            match store.revoke_consent(&user, &client_id).await.map_err(|e| e.to_string())? {
                true => Ok(format!("consent of {user} for {client_id} revoked")),
                false => Err(format!("{user} has no consent for {client_id}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn a_client_id_may_begin_with_a_hyphen() {
        let parse = |args: &[&str]| crate::config::Cli::try_parse_from(args).map(|cli| cli.command);
        let removed = parse(&["oauth-service", "client", "remove", "-uX1", "--data-dir", "d"]).expect("parses");
        assert!(
            matches!(&removed, Some(Command::Client(ClientCommand::Remove { client_id })) if client_id == "-uX1"),
            "{removed:?}"
        );
        let revoked = parse(&["oauth-service", "consent", "revoke", "bob", "-uX1", "--data-dir", "d"]).expect("parses");
        assert!(
            matches!(&revoked, Some(Command::Consent(ConsentCommand::Revoke { user, client_id }))
                if user == "bob" && client_id == "-uX1"),
            "{revoked:?}"
        );
    }
}
