//! `gateway`: the HTTP edge, with every component linked in (`--standalone`).

use std::future::Future;
use std::pin::Pin;

use gateway::{Config, Error};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn standalone(config: Config, shutdown: CancellationToken) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send>> {
    Box::pin(gateway::standalone::run(config, shutdown))
}

#[tokio::main]
async fn main() {
    gateway::entry::main("gateway", Some(standalone)).await;
}
