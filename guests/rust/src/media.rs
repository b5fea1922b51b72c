//! The organization's media: images, audio, video and PDF documents that
//! the host fetches, checks and keeps, and that clients receive only from
//! moat (`GET /v1/media/{id}` or a signed URL), never from where they came
//! from. The module needs `capabilities: {media: true}`; [`fetch`] an
//! http grant covering the URL as well.
//!
//! ```ignore
//! let img = moat::media::fetch("https://images.example.com/cat.jpg")?;
//! let thumb = moat::media::thumbnail(&img.id, 256, 256, moat::media::Fit::Cover)?;
//! let (info, bytes) = moat::media::get(&thumb.id)?;
//! ```
//!
//! The host decides what an item is from its bytes, never from a claim:
//! bytes of no allowed type, or of another type than the one given, fail
//! with `invalid_argument`. JPEG and PNG images are kept without their
//! metadata (EXIF, GPS); an item's id is the hex SHA-256 of the bytes
//! kept. Limits are those of `abi/media.go` in the moat repository.

use crate::json::{self, base64, Object};
use crate::{code, transport, Error, Result};

/// How a thumbnail fits its box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The whole image within width × height, aspect kept.
    Contain,
    /// Width × height filled, aspect kept, the overflow cut from the centre.
    Cover,
    /// Exactly width × height, stretched.
    Fill,
}

impl Fit {
    fn as_str(self) -> &'static str {
        match self {
            Fit::Contain => "contain",
            Fit::Cover => "cover",
            Fit::Fill => "fill",
        }
    }
}

/// A stored item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// 64 lowercase hexadecimal digits: the SHA-256 of the bytes kept.
    pub id: String,
    /// What the host found the bytes to be: "image/png", "application/pdf"...
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its width and height in pixels; 0 for what is not an image.
    pub width: u32,
    /// See `width`.
    pub height: u32,
}

fn read_info(op: &str, o: &Object<'_>) -> Result<Info> {
    let bad = || Error::new(code::INTERNAL, format!("{}: the reply lacks the item's id, type or size", op));
    let dim = |key: &str| -> Result<u32> { Ok(o.get_i64(key)?.unwrap_or(0).clamp(0, u32::MAX as i64) as u32) };
    Ok(Info {
        id: o.get_string("id")?.filter(|s| !s.is_empty()).ok_or_else(bad)?,
        media_type: o.get_string("type")?.ok_or_else(bad)?,
        size: o.get_i64("size")?.ok_or_else(bad)?.max(0) as u64,
        width: dim("width")?,
        height: dim("height")?,
    })
}

fn info_call(op: &str, req: &[(&str, String)]) -> Result<Info> {
    transport::round_trip(op, json::object(req).as_bytes(), |body| read_info(op, &Object::parse(body, op)?))
}

/// Has the host download `url` (under the module's http grants) and keep
/// it. The plugin never sees the bytes; [`get`] reads them.
pub fn fetch(url: &str) -> Result<Info> {
    info_call("media.fetch", &[("url", json::string(url))])
}

/// Keeps `data` (at most 2 MiB). `media_type`, when not empty, must be
/// what the bytes are ("image/png"); the host sniffs the type either way.
pub fn put(data: &[u8], media_type: &str) -> Result<Info> {
    let mut req = vec![("data", json::string(&base64::encode(data)))];
    if !media_type.is_empty() {
        req.push(("type", json::string(media_type)));
    }
    info_call("media.put", &req)
}

/// An item of the caller's organization and its bytes. An item over
/// 2 MiB fails with `too_large` (clients read it from `/v1/media/{id}`);
/// an id of no item of the organization with `not_found`.
pub fn get(id: &str) -> Result<(Info, Vec<u8>)> {
    transport::round_trip("media.get", json::object(&[("id", json::string(id))]).as_bytes(), |body| {
        let o = Object::parse(body, "media.get")?;
        let data = o.get_string("data")?.and_then(|d| base64::decode(d.as_bytes()));
        let data = data.ok_or_else(|| Error::new(code::INTERNAL, "media.get: the reply's data is missing or not base64"))?;
        Ok((read_info("media.get", &o)?, data))
    })
}

/// Describes an item of the caller's organization.
pub fn info(id: &str) -> Result<Info> {
    info_call("media.info", &[("id", json::string(id))])
}

/// Makes (and keeps) a thumbnail of the image item `id`, at most `width`
/// × `height` (each 1 to 2048), fitted by `fit`, and describes it.
pub fn thumbnail(id: &str, width: u32, height: u32, fit: Fit) -> Result<Info> {
    info_call(
        "media.thumbnail",
        &[("id", json::string(id)), ("width", width.to_string()), ("height", height.to_string()), ("fit", json::string(fit.as_str()))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::fake;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn requests_and_replies() {
        let seen = Rc::new(RefCell::new(Vec::<String>::new()));
        let s = seen.clone();
        fake::set(Some(Box::new(move |op, req| {
            s.borrow_mut().push(format!("{} {}", op, String::from_utf8(req.to_vec()).unwrap()));
            match op {
                "media.get" if req.windows(4).any(|w| w == b"gone") => (1, br#"{"code":"not_found","message":"no media item gone"}"#.to_vec()),
                "media.get" => (0, br#"{"id":"ab12","type":"image/png","size":3,"width":64,"height":48,"data":"AQL/"}"#.to_vec()),
                "media.thumbnail" => (0, br#"{"id":"cd34","type":"application/pdf","size":9}"#.to_vec()),
                "media.info" => (0, br#"{"type":"image/png","size":3}"#.to_vec()),
                _ => (0, br#"{"id":"ab12","type":"image/png","size":3,"width":64,"height":48}"#.to_vec()),
            }
        })));
        let want = Info { id: "ab12".into(), media_type: "image/png".into(), size: 3, width: 64, height: 48 };
        assert_eq!(put(b"\x01\x02\xff", "image/png").unwrap(), want);
        put(b"", "").unwrap();
        assert_eq!(fetch("https://img.example.com/a.png").unwrap(), want);
        assert_eq!(get("ab12").unwrap(), (want.clone(), b"\x01\x02\xff".to_vec()));
        let t = thumbnail("ab12", 16, 12, Fit::Cover).unwrap();
        assert_eq!((t.id.as_str(), t.media_type.as_str(), t.width, t.height), ("cd34", "application/pdf", 0, 0));
        assert!(info("ab12").unwrap_err().is(code::INTERNAL), "an item without its id");
        assert!(get("gone").unwrap_err().is(code::NOT_FOUND));
        assert_eq!(
            *seen.borrow(),
            vec![
                r#"media.put {"data":"AQL/","type":"image/png"}"#,
                r#"media.put {"data":""}"#,
                r#"media.fetch {"url":"https://img.example.com/a.png"}"#,
                r#"media.get {"id":"ab12"}"#,
                r#"media.thumbnail {"id":"ab12","width":16,"height":12,"fit":"cover"}"#,
                r#"media.info {"id":"ab12"}"#,
                r#"media.get {"id":"gone"}"#,
            ]
        );
        fake::set(None);
    }
}
