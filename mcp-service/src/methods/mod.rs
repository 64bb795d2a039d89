//! Method handlers, one module per feature area.

pub mod input;
pub mod lifecycle;
pub mod prompts;
pub mod resources;
pub mod subscriptions;
pub mod tools;

use serde_json::{Value, json};

use crate::catalog::Item;
use crate::error::Error;
use crate::paging;
use crate::request::Request;

/// One page of the items the caller may see, each shaped for the request's revision.
pub(crate) fn list_page(
    req: &Request<'_>,
    items: &[Item],
    page_size: usize,
    key: &str,
    shape: impl Fn(&Value) -> Value,
) -> Result<Value, Error> {
    let cursor = req.cursor()?;
    let visible: Vec<&Item> = if req.ctx.principal.is_none() {
        items.iter().collect()
    } else {
        items.iter().filter(|i| req.permits(&i.scopes)).collect()
    };
    let (page, next) = paging::page(&visible, cursor, page_size)?;
    let mut result = json!({ key: page.iter().map(|i| shape(&i.def)).collect::<Vec<_>>() });
    if let Some(next) = next {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}
