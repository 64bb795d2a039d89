//! Opaque pagination cursors: a Base64url-encoded offset with a version tag.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::Error;

const TAG: &str = "o1:";

pub fn encode(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("{TAG}{offset}"))
}

/// The offset a cursor points at; a cursor we did not issue is `Invalid cursor` (-32602).
pub fn decode(cursor: &str) -> Result<usize, Error> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| Error::InvalidCursor)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| Error::InvalidCursor)?;
    text.strip_prefix(TAG).and_then(|n| n.parse().ok()).ok_or(Error::InvalidCursor)
}

/// One page of `items` starting at the cursor, and the cursor of the next page.
pub fn page<'a, T>(items: &'a [T], cursor: Option<&str>, size: usize) -> Result<(&'a [T], Option<String>), Error> {
    let start = cursor.map(decode).transpose()?.unwrap_or(0);
    if start > items.len() {
        return Err(Error::InvalidCursor);
    }
    let end = start.saturating_add(size.max(1)).min(items.len());
    let next = (end < items.len()).then(|| encode(end));
    Ok((&items[start..end], next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_through() {
        let items: Vec<u32> = (0..5).collect();
        let (p1, c1) = page(&items, None, 2).expect("page 1");
        assert_eq!(p1, &[0, 1]);
        let (p2, c2) = page(&items, c1.as_deref(), 2).expect("page 2");
        assert_eq!(p2, &[2, 3]);
        let (p3, c3) = page(&items, c2.as_deref(), 2).expect("page 3");
        assert_eq!(p3, &[4]);
        assert!(c3.is_none());
    }

    #[test]
    fn rejects_foreign_cursors() {
        let items = [1, 2];
        for bad in ["", "!!", "bm9wZQ", &encode(99)] {
            assert!(matches!(page(&items, Some(bad), 2), Err(Error::InvalidCursor)), "{bad}");
        }
    }
}
