//! The module's documents: JSON objects in the models its `moat.yaml`
//! declares (`models:`), each granted by name (`capabilities: {db:
//! [notes]}`). The host checks every document against its model and scopes
//! every op to the calling principal's organization (and, in a model with
//! `scope: user`, to the principal): another organization's or user's
//! document is simply not found.
//!
//! ```ignore
//! use moat::json::Value;
//! let note = Value::object([("title", "buy milk".into()), ("done", false.into())]);
//! let ins = moat::db::insert("notes", &note)?;
//! let page = moat::db::query("notes", &moat::db::Query::new().filter("done", "=", false).order("-due").limit(50))?;
//! for doc in &page.docs {
//!     let title = doc.object()?.get_string("title")?;
//! }
//! // Optimistic concurrency: write back with the version read.
//! match moat::db::update("notes", &ins.id, &moat::db::Change::new().set("done", true).version(ins.version)) {
//!     Err(e) if e.is(moat::code::CONFLICT) => { /* read again, retry */ }
//!     other => { other?; }
//! }
//! ```
//!
//! Field types, operators and limits are those of `abi/db.go` in the moat
//! repository.

use crate::json::{self, Object, Value};
use crate::{code, transport, Error, Result};

/// Filter operators.
pub mod op {
    /// Equal.
    pub const EQ: &str = "=";
    /// Not equal (a document without the field matches no condition on it).
    pub const NE: &str = "!=";
    /// Less than.
    pub const LT: &str = "<";
    /// Less than or equal.
    pub const LE: &str = "<=";
    /// Greater than.
    pub const GT: &str = ">";
    /// Greater than or equal.
    pub const GE: &str = ">=";
    /// One of an array of at most 100 values.
    pub const IN: &str = "in";
    /// A string or time field starting with a string.
    pub const PREFIX: &str = "prefix";
    /// An array field holding the value, or a string field holding it as a substring.
    pub const CONTAINS: &str = "contains";
}

/// A new document's id and version (1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// The id the host made: 28 lowercase hexadecimal digits.
    pub id: String,
    /// 1.
    pub version: i64,
}

/// A stored document and what the host keeps beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doc {
    /// Its id.
    pub id: String,
    /// 1 on insert, one more on every update.
    pub version: i64,
    /// The user who inserted it.
    pub owner: String,
    /// RFC 3339 in UTC, millisecond precision.
    pub created: String,
    /// RFC 3339 in UTC, millisecond precision.
    pub updated: String,
    /// The document: a JSON object.
    pub json: String,
}

impl Doc {
    /// The document's members, to read its fields.
    pub fn object(&self) -> Result<Object<'_>> {
        Object::parse(self.json.as_bytes(), "the document")
    }

    fn read(body: &[u8], op: &str) -> Result<Doc> {
        let o = Object::parse(body, op)?;
        let bad = || Error::new(code::INTERNAL, format!("{}: a document of the reply lacks its id, version or doc", op));
        Ok(Doc {
            id: o.get_string("id")?.ok_or_else(bad)?,
            version: o.get_i64("version")?.ok_or_else(bad)?,
            owner: o.get_string("owner")?.unwrap_or_default(),
            created: o.get_string("created")?.unwrap_or_default(),
            updated: o.get_string("updated")?.unwrap_or_default(),
            json: o.get_object("doc")?.ok_or_else(bad)?,
        })
    }
}

/// One condition of a query: `[field, op, value]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    /// A field the model declares.
    pub field: String,
    /// One of [`op`].
    pub op: String,
    /// A value of the field's type (an array for `in`).
    pub value: Value,
}

/// A condition: `cond("done", "=", false)`.
pub fn cond(field: &str, op: &str, value: impl Into<Value>) -> Cond {
    Cond { field: field.to_string(), op: op.to_string(), value: value.into() }
}

fn write_conds(req: &mut Vec<(&str, String)>, conds: &[Cond]) -> Result<()> {
    if conds.is_empty() {
        return Ok(());
    }
    let list = Value::Array(conds.iter().map(|c| Value::Array(vec![c.field.as_str().into(), c.op.as_str().into(), c.value.clone()])).collect());
    req.push(("where", list.to_json()?));
    Ok(())
}

/// A query: every condition must hold; `order` names fields, `"-field"`
/// for descending (ties, and no order, go by id); `limit` is the page
/// size (0: the host's default, 100; at most 1000); `after` is the
/// [`Page::next`] of the previous page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query {
    /// The conditions, all of which must hold.
    pub conds: Vec<Cond>,
    /// The order.
    pub order: Vec<String>,
    /// The page size.
    pub limit: u32,
    /// Where the previous page ended.
    pub after: Option<String>,
}

impl Query {
    /// Every document, by id.
    pub fn new() -> Query {
        Query::default()
    }
    /// Adds the condition `field op value`.
    pub fn filter(mut self, field: &str, op: &str, value: impl Into<Value>) -> Query {
        self.conds.push(cond(field, op, value));
        self
    }
    /// Orders by `field` next (`"-field"` for descending).
    pub fn order(mut self, field: &str) -> Query {
        self.order.push(field.to_string());
        self
    }
    /// Sets the page size.
    pub fn limit(mut self, n: u32) -> Query {
        self.limit = n;
        self
    }
    /// Continues after the page whose [`Page::next`] this is.
    pub fn after(mut self, cursor: &str) -> Query {
        self.after = Some(cursor.to_string());
        self
    }
}

/// One page of a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The documents.
    pub docs: Vec<Doc>,
    /// Where the next page starts, `None` on the last.
    pub next: Option<String>,
}

/// What [`update`] does: `set`'s fields replace theirs, `unset`'s are
/// removed; with `version` not 0 the document must still be at that
/// version, or the update fails with [`code::CONFLICT`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Change {
    /// The fields to set.
    pub set: Vec<(String, Value)>,
    /// The fields to remove.
    pub unset: Vec<String>,
    /// The version the document must be at (0: any).
    pub version: i64,
}

impl Change {
    /// No change yet.
    pub fn new() -> Change {
        Change::default()
    }
    /// Sets `field` to `value`.
    pub fn set(mut self, field: &str, value: impl Into<Value>) -> Change {
        self.set.push((field.to_string(), value.into()));
        self
    }
    /// Removes `field`.
    pub fn unset(mut self, field: &str) -> Change {
        self.unset.push(field.to_string());
        self
    }
    /// Requires the document to be at `version`.
    pub fn version(mut self, version: i64) -> Change {
        self.version = version;
        self
    }
}

fn model_request<'a>(model: &str, id: Option<&str>) -> Vec<(&'a str, String)> {
    let mut req = vec![("model", json::string(model))];
    if let Some(id) = id {
        req.push(("id", json::string(id)));
    }
    req
}

/// Stores `doc` (an object) as a new document of `model`.
pub fn insert(model: &str, doc: &Value) -> Result<Inserted> {
    if !doc.is_object() {
        return Err(Error::new(code::INVALID_ARGUMENT, "db.insert: the document must be a JSON object (Value::object)"));
    }
    let mut req = model_request(model, None);
    req.push(("doc", doc.to_json().map_err(|e| Error::new(e.code(), format!("db.insert: the document: {}", e.message())))?));
    transport::round_trip("db.insert", json::object(&req).as_bytes(), |body| {
        let o = Object::parse(body, "db.insert")?;
        match (o.get_string("id")?, o.get_i64("version")?) {
            (Some(id), Some(version)) => Ok(Inserted { id, version }),
            _ => Err(Error::new(code::INTERNAL, "db.insert: the reply has no id and version")),
        }
    })
}

/// Reads the document `id` of `model`; `None` when the caller's scope
/// holds none.
pub fn get(model: &str, id: &str) -> Result<Option<Doc>> {
    let req = json::object(&model_request(model, Some(id)));
    transport::round_trip("db.get", req.as_bytes(), |body| {
        if !Object::parse(body, "db.get")?.get_bool("found")? {
            return Ok(None);
        }
        Doc::read(body, "db.get").map(Some)
    })
}

/// Reads one page of the documents of `model` that `q` selects.
pub fn query(model: &str, q: &Query) -> Result<Page> {
    let mut req = model_request(model, None);
    write_conds(&mut req, &q.conds).map_err(|e| Error::new(e.code(), format!("db.query: a condition: {}", e.message())))?;
    if !q.order.is_empty() {
        req.push(("order", Value::from(q.order.clone()).to_json()?));
    }
    if q.limit > 0 {
        req.push(("limit", q.limit.to_string()));
    }
    if let Some(after) = &q.after {
        req.push(("after", json::string(after)));
    }
    transport::round_trip("db.query", json::object(&req).as_bytes(), |body| {
        let o = Object::parse(body, "db.query")?;
        let docs = match o.get_raw("docs") {
            None | Some(b"null") => Vec::new(),
            Some(raw) => json::elements(raw, "db.query")?.into_iter().map(|d| Doc::read(d, "db.query")).collect::<Result<Vec<_>>>()?,
        };
        Ok(Page { docs, next: o.get_string("next")?.filter(|n| !n.is_empty()) })
    })
}

/// Changes the document `id` of `model` and returns its new version. A
/// stale [`Change::version`] fails with [`code::CONFLICT`].
pub fn update(model: &str, id: &str, change: &Change) -> Result<i64> {
    let mut req = model_request(model, Some(id));
    if !change.set.is_empty() {
        let set = Value::Object(change.set.clone());
        req.push(("set", set.to_json().map_err(|e| Error::new(e.code(), format!("db.update: set: {}", e.message())))?));
    }
    if !change.unset.is_empty() {
        req.push(("unset", Value::from(change.unset.clone()).to_json()?));
    }
    if change.version != 0 {
        req.push(("version", change.version.to_string()));
    }
    transport::round_trip("db.update", json::object(&req).as_bytes(), |body| {
        Object::parse(body, "db.update")?.get_i64("version")?.ok_or_else(|| Error::new(code::INTERNAL, "db.update: the reply has no version"))
    })
}

/// Removes the document `id` of `model` and reports whether it was there.
/// With `version` not 0 the document must still be at that version, or
/// the delete fails with [`code::CONFLICT`].
pub fn delete(model: &str, id: &str, version: i64) -> Result<bool> {
    let mut req = model_request(model, Some(id));
    if version != 0 {
        req.push(("version", version.to_string()));
    }
    transport::round_trip("db.delete", json::object(&req).as_bytes(), |body| Object::parse(body, "db.delete")?.get_bool("deleted"))
}

/// Counts the documents of `model` for which every condition holds.
pub fn count(model: &str, conds: &[Cond]) -> Result<i64> {
    let mut req = model_request(model, None);
    write_conds(&mut req, conds).map_err(|e| Error::new(e.code(), format!("db.count: a condition: {}", e.message())))?;
    transport::round_trip("db.count", json::object(&req).as_bytes(), |body| {
        Object::parse(body, "db.count")?.get_i64("count")?.ok_or_else(|| Error::new(code::INTERNAL, "db.count: the reply has no count"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::fake;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Installs a fake host answering `reply` and returns the requests it saw.
    fn host(reply: &'static str, status: u32) -> Rc<RefCell<Vec<(String, String)>>> {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let s = seen.clone();
        fake::set(Some(Box::new(move |op, req| {
            s.borrow_mut().push((op.to_string(), String::from_utf8(req.to_vec()).unwrap()));
            (status, reply.as_bytes().to_vec())
        })));
        seen
    }

    #[test]
    fn requests_and_replies() {
        let seen = host(r#"{"id":"0123456789abcdef0123456789ab","version":1}"#, 0);
        let doc = Value::object([("title", "t\"".into()), ("n", 3.into())]);
        assert_eq!(insert("notes", &doc).unwrap(), Inserted { id: "0123456789abcdef0123456789ab".into(), version: 1 });
        assert_eq!(seen.borrow()[0], ("db.insert".into(), r#"{"model":"notes","doc":{"title":"t\"","n":3}}"#.into()));

        // What is not one JSON object never reaches the host.
        assert!(insert("notes", &Value::from(vec![1])).unwrap_err().is(code::INVALID_ARGUMENT));
        assert!(insert("notes", &Value::object([("f", f64::NAN.into())])).unwrap_err().is(code::INVALID_ARGUMENT));
        assert!(Value::raw(r#"{}, "model": "secrets""#).is_err());
        assert_eq!(seen.borrow().len(), 1);

        let seen = host(
            r#"{"docs":[{"id":"a","version":2,"doc":{"t":"x"},"owner":"ann","created":"c","updated":"u"},{"id":"b","version":1,"doc":{},"owner":"bob","created":"c2","updated":"u2"}],"next":"n1"}"#,
            0,
        );
        let q = Query::new().filter("tags", op::CONTAINS, "h\"o").filter("n", op::IN, vec![1, 2]).filter("done", op::EQ, false).order("-n").limit(2).after("cur");
        let page = query("notes", &q).unwrap();
        assert_eq!(
            seen.borrow()[0].1,
            r#"{"model":"notes","where":[["tags","contains","h\"o"],["n","in",[1,2]],["done","=",false]],"order":["-n"],"limit":2,"after":"cur"}"#
        );
        assert_eq!(page.next.as_deref(), Some("n1"));
        assert_eq!(page.docs.len(), 2);
        assert_eq!(page.docs[0].json, r#"{"t":"x"}"#);
        assert_eq!(page.docs[0].object().unwrap().get_string("t").unwrap().as_deref(), Some("x"));
        assert_eq!((page.docs[1].owner.as_str(), page.docs[1].version), ("bob", 1));

        host(r#"{"docs":[{"id":"a"}]}"#, 0);
        assert!(query("notes", &Query::new()).unwrap_err().is(code::INTERNAL), "a document without its version");
        let seen = host(r#"{"docs":[]}"#, 0);
        assert_eq!(query("notes", &Query::new()).unwrap(), Page { docs: vec![], next: None });
        assert_eq!(seen.borrow()[0].1, r#"{"model":"notes"}"#);

        let seen = host(r#"{"version":4}"#, 0);
        assert_eq!(update("notes", "a", &Change::new().set("done", true).unset("body").version(3)).unwrap(), 4);
        assert_eq!(seen.borrow()[0].1, r#"{"model":"notes","id":"a","set":{"done":true},"unset":["body"],"version":3}"#);
        host(r#"{"code":"conflict","message":"document a is at version 4, not 3"}"#, 1);
        let e = update("notes", "a", &Change::new().set("done", true).version(3)).unwrap_err();
        assert!(e.is(code::CONFLICT) && e.message().contains("version 4"), "{:?}", e);

        host(r#"{"found":false}"#, 0);
        assert_eq!(get("notes", "z").unwrap(), None);
        host(r#"{"count":7}"#, 0);
        assert_eq!(count("notes", &[cond("done", op::EQ, false)]).unwrap(), 7);
        let seen = host(r#"{"deleted":true}"#, 0);
        assert!(delete("notes", "a", 4).unwrap());
        assert_eq!(seen.borrow()[0].1, r#"{"model":"notes","id":"a","version":4}"#);
        fake::set(None);
    }
}
