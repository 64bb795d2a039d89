//! `gateway`: the HTTP edge, with every component linked in (`--standalone`).

use futures_util::future::BoxFuture;
use gateway::{Config, Error};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn standalone(config: Config, shutdown: CancellationToken) -> BoxFuture<'static, Result<(), Error>> {
    Box::pin(gateway::standalone::run(config, shutdown))
}

#[tokio::main]
async fn main() {
    gateway::entry::main("gateway", Some(standalone)).await;
}
