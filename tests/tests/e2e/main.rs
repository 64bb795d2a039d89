//! End-to-end tests against the real binaries. Build them first:
//! `cargo build --workspace --bins` (the README's test command does).

mod auth;
mod definitions;
mod deployment;
mod errors;
mod faults;
mod faults_load;
mod grpc;
mod hostile_input;
mod http;
mod http_backend;
mod oauth;
mod oauth_clients;
mod observability;
mod process;
mod replicas;
mod result_cache;
mod sessions;
mod sql_backend;
mod stdio;
mod text_tools;
