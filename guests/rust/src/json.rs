//! Just enough JSON for the op payloads: writing strings and objects, and
//! reading the members of a reply object. Exposed for users of
//! [`call`](crate::call) with ops this crate does not wrap.

use crate::{code, Error, Result};
use std::fmt::Write;

/// Returns `s` as a JSON string literal.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(&mut out, s);
    out
}

/// Appends `s` to `out` as a JSON string literal.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Returns a JSON object of the given members; each value is raw JSON
/// (use [`string`] for strings).
pub fn object(members: &[(&str, String)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(&mut out, k);
        out.push(':');
        out.push_str(v);
    }
    out.push('}');
    out
}

/// A parsed JSON object: its members' names and raw values.
pub struct Object<'a> {
    what: &'a str,
    members: Vec<(String, &'a [u8])>,
}

impl<'a> Object<'a> {
    /// Parses a JSON object. `what` names the payload in error messages
    /// (for example the op name).
    pub fn parse(text: &'a [u8], what: &'a str) -> Result<Object<'a>> {
        let mut r = Reader { b: text, i: 0 };
        let members = r.object().ok_or_else(|| malformed(what, text))?;
        r.ws();
        if r.i != text.len() {
            return Err(malformed(what, text));
        }
        Ok(Object { what, members })
    }

    /// The members in order: each name and its raw JSON value (a name
    /// given twice appears twice; the `get_*` methods read the last).
    pub fn members(&self) -> impl Iterator<Item = (&str, &'a [u8])> + '_ {
        self.members.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The raw JSON value of member `key`, if present.
    pub fn get_raw(&self, key: &str) -> Option<&'a [u8]> {
        self.members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The string member `key`: `None` when absent or null, an error when
    /// it is of another type.
    pub fn get_string(&self, key: &str) -> Result<Option<String>> {
        match self.get_raw(key) {
            None | Some(b"null") => Ok(None),
            Some(v) => Reader { b: v, i: 0 }.string().map(Some).ok_or_else(|| self.wrong(key, "a string")),
        }
    }

    /// The boolean member `key`; absent or null is false.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.get_raw(key) {
            None | Some(b"null") | Some(b"false") => Ok(false),
            Some(b"true") => Ok(true),
            Some(_) => Err(self.wrong(key, "a boolean")),
        }
    }

    /// The integer member `key`: `None` when absent or null, an error when
    /// it is not an integer that fits in an `i64`.
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>> {
        match self.get_raw(key) {
            None | Some(b"null") => Ok(None),
            Some(v) => std::str::from_utf8(v).ok().and_then(|t| t.parse::<i64>().ok()).map(Some).ok_or_else(|| self.wrong(key, "an integer")),
        }
    }

    /// The number member `key`: `None` when absent or null, an error when
    /// it is not a number.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get_raw(key) {
            None | Some(b"null") => Ok(None),
            Some(v) => {
                let mut r = Reader { b: v, i: 0 };
                if r.number().is_none() || r.i != v.len() {
                    return Err(self.wrong(key, "a number"));
                }
                std::str::from_utf8(v).ok().and_then(|t| t.parse::<f64>().ok()).map(Some).ok_or_else(|| self.wrong(key, "a number"))
            }
        }
    }

    /// The object member `key` as JSON text: `None` when absent or null,
    /// an error when it is of another type.
    pub fn get_object(&self, key: &str) -> Result<Option<String>> {
        match self.get_raw(key) {
            None | Some(b"null") => Ok(None),
            Some(v) if v.first() == Some(&b'{') => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            Some(_) => Err(self.wrong(key, "an object")),
        }
    }

    /// The array-of-strings member `key`; absent or null is empty.
    pub fn get_strings(&self, key: &str) -> Result<Vec<String>> {
        match self.get_raw(key) {
            None | Some(b"null") => Ok(Vec::new()),
            Some(v) => Reader { b: v, i: 0 }.strings().ok_or_else(|| self.wrong(key, "an array of strings")),
        }
    }

    fn wrong(&self, key: &str, want: &str) -> Error {
        Error::new(code::INTERNAL, format!("{}: member {:?} is not {}", self.what, key, want))
    }
}

fn malformed(what: &str, text: &[u8]) -> Error {
    let shown = String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned();
    Error::new(code::INTERNAL, format!("{}: malformed JSON reply: {}", what, shown))
}

/// A cursor over JSON text. Every method returns None on malformed input.
struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn object(&mut self) -> Option<Vec<(String, &'a [u8])>> {
        self.eat(b'{')?;
        let mut members = Vec::new();
        if self.eat(b'}').is_some() {
            return Some(members);
        }
        loop {
            let k = self.string()?;
            self.eat(b':')?;
            self.ws();
            let start = self.i;
            self.skip(0)?;
            members.push((k, &self.b[start..self.i]));
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(members);
                }
                _ => return None,
            }
        }
    }

    fn strings(&mut self) -> Option<Vec<String>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            out.push(self.string()?);
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        self.i += 4;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let mut out = Vec::new();
        loop {
            let start = self.i;
            while self.i < self.b.len() && !matches!(self.b[self.i], b'"' | b'\\' | 0..=0x1f) {
                self.i += 1;
            }
            out.extend_from_slice(&self.b[start..self.i]);
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    // Invalid UTF-8 in a reply becomes U+FFFD, as Go decodes it.
                    return Some(String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()));
                }
                b'\\' => {
                    self.i += 1;
                    let c = *self.b.get(self.i)?;
                    self.i += 1;
                    let plain = match c {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 8,
                        b'f' => 12,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => 0,
                        _ => return None,
                    };
                    if c != b'u' {
                        out.push(plain);
                        continue;
                    }
                    let mut r = self.hex4()?;
                    if (0xD800..0xDC00).contains(&r) && self.b.get(self.i..self.i + 2) == Some(b"\\u") {
                        let save = self.i;
                        self.i += 2;
                        match self.hex4() {
                            Some(lo) if (0xDC00..0xE000).contains(&lo) => r = 0x10000 + ((r - 0xD800) << 10) + (lo - 0xDC00),
                            _ => self.i = save,
                        }
                    }
                    let ch = char::from_u32(r).unwrap_or('\u{FFFD}');
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
                _ => return None, // a raw control character
            }
        }
    }

    /// Steps over one value of any type; nesting is bounded so a hostile
    /// reply cannot exhaust the stack.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > 64 {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.i += 1;
                if self.eat(close).is_some() {
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.string()?;
                        self.eat(b':')?;
                    }
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        c if c == close => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => {
                // true, false, null or a number, held to JSON's grammar:
                // validate checks JSON handed to the SDK with this too.
                for lit in [&b"true"[..], b"false", b"null"] {
                    if self.b[self.i..].starts_with(lit) {
                        self.i += lit.len();
                        return Some(());
                    }
                }
                self.number()
            }
        }
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        if self.i > start {
            Some(())
        } else {
            None
        }
    }

    /// Steps over a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    fn number(&mut self) -> Option<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        if self.b.get(self.i) == Some(&b'0') {
            self.i += 1;
        } else {
            self.digits()?;
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.digits()?;
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
        }
        Some(())
    }

    /// The raw elements of the array at the cursor.
    fn elements(&mut self) -> Option<Vec<&'a [u8]>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            self.ws();
            let start = self.i;
            self.skip(0)?;
            out.push(&self.b[start..self.i]);
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }
}

/// Reports whether `text` is exactly one JSON value (white space around
/// it allowed). The SDK checks JSON handed to it with this before the
/// JSON joins a request, so that text such as `{}, "model": "other"`
/// cannot add members to the request around it.
pub fn valid(text: &str) -> bool {
    let mut r = Reader { b: text.as_bytes(), i: 0 };
    r.ws();
    if r.skip(0).is_none() {
        return false;
    }
    r.ws();
    r.i == r.b.len()
}

/// The raw elements of a JSON array (each element's JSON text). `what`
/// names the payload in error messages.
pub fn elements<'a>(text: &'a [u8], what: &str) -> Result<Vec<&'a [u8]>> {
    let mut r = Reader { b: text, i: 0 };
    let out = r.elements().ok_or_else(|| malformed(what, text))?;
    r.ws();
    if r.i != text.len() {
        return Err(malformed(what, text));
    }
    Ok(out)
}

/// A JSON value to send: documents, conditions' values, metadata. Build
/// one from Rust values with `From` (`"x".into()`, `3.into()`,
/// `vec!["a", "b"].into()`, `None::<i64>.into()` for null) and objects
/// with [`Value::object`]; [`Value::raw`] takes JSON text, checked.
///
/// ```
/// use moat::json::Value;
/// let doc = Value::object([("title", "buy milk".into()), ("n", 3.into()), ("tags", vec!["home"].into())]);
/// assert_eq!(doc.to_json().unwrap(), r#"{"title":"buy milk","n":3,"tags":["home"]}"#);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// null.
    Null,
    /// true or false.
    Bool(bool),
    /// An integer (the host's int fields hold at most 2^53-1 in magnitude).
    Int(i64),
    /// A number; NaN and the infinities have no JSON form and fail
    /// [`Value::to_json`].
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, its members in order.
    Object(Vec<(String, Value)>),
    /// JSON text, checked when made with [`Value::raw`].
    Raw(Raw),
}

/// JSON text known to be one JSON value: only [`Value::raw`] makes one.
#[derive(Clone, Debug, PartialEq)]
pub struct Raw(String);

impl Raw {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Value {
    /// An object of the given members.
    pub fn object<K: Into<String>>(members: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Object(members.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// JSON text as a value; an error (invalid_argument) unless the text
    /// is exactly one JSON value.
    pub fn raw(text: impl Into<String>) -> Result<Value> {
        let text = text.into();
        if !valid(&text) {
            let shown: String = text.chars().take(100).collect();
            return Err(Error::new(code::INVALID_ARGUMENT, format!("not one JSON value: {}", shown)));
        }
        Ok(Value::Raw(Raw(text)))
    }

    /// Whether the value is an object (or raw JSON text of one).
    pub fn is_object(&self) -> bool {
        match self {
            Value::Object(_) => true,
            Value::Raw(r) => r.0.trim_start().starts_with('{'),
            _ => false,
        }
    }

    /// The value as JSON text; an error (invalid_argument) for a number
    /// that is not finite.
    pub fn to_json(&self) -> Result<String> {
        let mut out = String::new();
        self.write(&mut out)?;
        Ok(out)
    }

    fn write(&self, out: &mut String) -> Result<()> {
        match self {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(v) => {
                let _ = write!(out, "{}", v);
            }
            Value::Float(v) if v.is_finite() => {
                let _ = write!(out, "{}", v);
            }
            Value::Float(v) => return Err(Error::new(code::INVALID_ARGUMENT, format!("the number {} has no JSON form", v))),
            Value::Str(s) => write_string(out, s),
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out)?;
                }
                out.push(']');
            }
            Value::Object(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k);
                    out.push(':');
                    v.write(out)?;
                }
                out.push('}');
            }
            Value::Raw(r) => out.push_str(&r.0),
        }
        Ok(())
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}
impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::Str(s.clone())
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Value {
        Value::Float(v as f64)
    }
}
macro_rules! value_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::Int(v as i64)
            }
        }
    )*};
}
value_from_int!(i8, i16, i32, i64, u8, u16, u32);
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}
impl<T: Clone + Into<Value>> From<&[T]> for Value {
    fn from(v: &[T]) -> Value {
        Value::Array(v.iter().cloned().map(Into::into).collect())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Standard padded base64, the JSON form of byte values (kv values).
pub mod base64 {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    /// Encodes `b`.
    pub fn encode(b: &[u8]) -> String {
        let mut out = String::with_capacity((b.len() + 2) / 3 * 4);
        for chunk in b.chunks(3) {
            let v = (chunk[0] as u32) << 16 | (*chunk.get(1).unwrap_or(&0) as u32) << 8 | *chunk.get(2).unwrap_or(&0) as u32;
            out.push(TABLE[(v >> 18) as usize] as char);
            out.push(TABLE[(v >> 12 & 63) as usize] as char);
            out.push(if chunk.len() > 1 { TABLE[(v >> 6 & 63) as usize] as char } else { '=' });
            out.push(if chunk.len() > 2 { TABLE[(v & 63) as usize] as char } else { '=' });
        }
        out
    }

    /// Decodes `s`, or returns None if it is not padded standard base64.
    pub fn decode(s: &[u8]) -> Option<Vec<u8>> {
        if s.len() % 4 != 0 {
            return None;
        }
        let mut out = Vec::with_capacity(s.len() / 4 * 3);
        for (n, q) in s.chunks(4).enumerate() {
            let last = (n + 1) * 4 == s.len();
            let mut v = 0u32;
            let mut pad = 0;
            for (k, &c) in q.iter().enumerate() {
                let d = match c {
                    b'A'..=b'Z' => c - b'A',
                    b'a'..=b'z' => c - b'a' + 26,
                    b'0'..=b'9' => c - b'0' + 52,
                    b'+' => 62,
                    b'/' => 63,
                    b'=' if last && k >= 2 => {
                        pad += 1;
                        0
                    }
                    _ => return None,
                };
                if pad > 0 && c != b'=' {
                    return None;
                }
                v = v << 6 | d as u32;
            }
            out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8][..3 - pad]);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip() {
        for s in ["", "plain", "quote \" back \\ slash", "nl\nt\tcr\r", "\u{1}\u{1f}", "ünï €😀"] {
            let lit = string(s);
            let got = Reader { b: lit.as_bytes(), i: 0 }.string();
            assert_eq!(got.as_deref(), Some(s), "literal {}", lit);
        }
    }

    #[test]
    fn escapes() {
        for (lit, want) in [
            (r#""\u00e9\/""#, Some("é/")),
            (r#""\ud83d\ude00""#, Some("😀")),
            (r#""\ud83d x""#, Some("\u{FFFD} x")),
            (r#""\q""#, None),
            ("\"raw\nnewline\"", None),
            (r#""unterminated"#, None),
        ] {
            assert_eq!(Reader { b: lit.as_bytes(), i: 0 }.string().as_deref(), want, "{}", lit);
        }
    }

    #[test]
    fn objects() {
        let body = br#" {"skip": {"a": [1, -2.5e3, true, null, {"b": "}"}]}, "value": "v\"1", "found": true, "keys": ["a", "b"]} "#;
        let o = Object::parse(body, "test").unwrap();
        assert_eq!(o.get_string("value").unwrap().as_deref(), Some("v\"1"));
        assert!(o.get_bool("found").unwrap());
        assert!(!o.get_bool("missing").unwrap());
        assert_eq!(o.get_strings("keys").unwrap(), vec!["a", "b"]);
        assert!(o.get_string("found").is_err());
        for bad in [&b"{"[..], b"[]", b"{\"a\":}", b"{\"a\":1,}", b"{} x", b""] {
            assert!(Object::parse(bad, "test").is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(Object::parse(format!("{{\"a\":{}}}", deep).as_bytes(), "test").is_err());
    }

    #[test]
    fn validity() {
        for (text, want) in [
            ("{}", true),
            (r#" {"a": [1, -2.5e3, true, null, {"b": "}"}]} "#, true),
            ("-0.5E+2", true),
            ("\"s\"", true),
            (r#"{}, "model": "other""#, false),
            (r#"{"a":1}}"#, false),
            (r#"{"a":tru}"#, false),
            (r#"{"a":truex}"#, false),
            (r#"{"a":01}"#, false),
            (r#"{"a":1.}"#, false),
            (r#"{"a":-}"#, false),
            (r#"{"a":+1}"#, false),
            (r#"{"a":NaN}"#, false),
            ("", false),
            ("1 2", false),
        ] {
            assert_eq!(valid(text), want, "{}", text);
        }
    }

    #[test]
    fn numbers() {
        let o = Object::parse(br#"{"i":9007199254740993,"neg":-5,"f":1.5,"e":1e3,"s":"7","big":99999999999999999999}"#, "t").unwrap();
        assert_eq!(o.get_i64("i").unwrap(), Some(9007199254740993));
        assert_eq!(o.get_i64("neg").unwrap(), Some(-5));
        assert_eq!(o.get_i64("none").unwrap(), None);
        assert!(o.get_i64("f").is_err() && o.get_i64("e").is_err() && o.get_i64("s").is_err());
        assert!(o.get_i64("big").is_err(), "an integer past 64 bits is refused, not clamped");
        assert_eq!(o.get_f64("f").unwrap(), Some(1.5));
        assert_eq!(o.get_f64("e").unwrap(), Some(1000.0));
        assert!(o.get_f64("s").is_err());
        assert_eq!(elements(br#"[1, {"a":[2]}, "x"]"#, "t").unwrap(), vec![&b"1"[..], br#"{"a":[2]}"#, br#""x""#]);
        assert!(elements(b"[1,]", "t").is_err());
    }

    #[test]
    fn values() {
        let v = Value::object([
            ("t\"", Value::from("a\\b\n\u{1} ü")),
            ("n", (-9007199254740991i64).into()),
            ("f", 0.5.into()),
            ("l", vec![Value::Bool(true), Value::Null, Value::Array(vec![]), Value::raw(r#" {"x":[1]} "#).unwrap()].into()),
            ("o", Value::object(Vec::<(String, Value)>::new())),
            ("none", None::<i64>.into()),
        ]);
        let text = v.to_json().unwrap();
        assert_eq!(text, "{\"t\\\"\":\"a\\\\b\\n\\u0001 ü\",\"n\":-9007199254740991,\"f\":0.5,\"l\":[true,null,[], {\"x\":[1]} ],\"o\":{},\"none\":null}");
        assert!(valid(&text));
        assert!(Value::Float(f64::NAN).to_json().is_err());
        assert!(Value::Array(vec![Value::Float(f64::INFINITY)]).to_json().is_err());
        assert!(Value::raw("1, 2").is_err());
        assert!(Value::raw(r#"{}, "model": "x""#).is_err());
        assert!(v.is_object() && Value::raw(" {}").unwrap().is_object() && !Value::from(1).is_object());
    }

    #[test]
    fn base64_round_trip() {
        for n in 0..10 {
            let b: Vec<u8> = (0..n).map(|i| (i * 37 + 200) as u8).collect();
            assert_eq!(base64::decode(base64::encode(&b).as_bytes()), Some(b));
        }
        assert_eq!(base64::encode(b"hello"), "aGVsbG8=");
        for bad in ["aGVsbG8", "aGV=bG8=", "a===", "!!!!"] {
            assert_eq!(base64::decode(bad.as_bytes()), None, "{}", bad);
        }
    }
}
