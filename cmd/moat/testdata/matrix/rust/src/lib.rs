//! The acceptance matrix's Rust plugin (see ../README.md): action `all`
//! tries every op family through the moat crate and prints one line per
//! family, `<family> ok <value>` or `<family> err <code>: <message>`;
//! action `noop` returns its input.

use moat::json::Value;
use moat::{ai, db, http, knowledge, kv, media, tasks};
use std::fmt;
use std::time::Duration;

/// Why a family failed: an op's error (shown as the SDK shows it, "code:
/// message"), or the standard library's when reading a file.
enum Failure {
    Op(moat::Error),
    Io(std::io::Error),
}

impl From<moat::Error> for Failure {
    fn from(e: moat::Error) -> Failure {
        Failure::Op(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::Io(e)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Op(e) => e.fmt(f),
            Failure::Io(e) => write!(f, "io: {}", e),
        }
    }
}

type Attempt = Result<String, Failure>;

/// A value every moat.yaml of the matrix sets.
fn config(key: &str) -> moat::Result<String> {
    moat::config::get(key)?.ok_or_else(|| moat::Error::new(moat::code::NOT_FOUND, format!("config has no {}", key)))
}

fn log(input: &str) -> Attempt {
    moat::log::write(moat::log::INFO, "matrix", &[("input", input.into())])?;
    Ok(String::new())
}

fn greeting(_: &str) -> Attempt {
    Ok(moat::config::get("greeting")?.unwrap_or_else(|| "-".into()))
}

fn key_value(input: &str) -> Attempt {
    let old = kv::get("matrix")?;
    kv::put("matrix", input.as_bytes())?;
    Ok(old.map_or_else(|| "-".into(), |v| String::from_utf8_lossy(&v).into_owned()))
}

fn documents(input: &str) -> Attempt {
    let n = db::count("notes", &[])?;
    db::insert("notes", &Value::object([("title", input.into())]))?;
    Ok(n.to_string())
}

fn search(input: &str) -> Attempt {
    let hits = knowledge::search("docs", "matrix", &knowledge::Search::new())?;
    knowledge::add("docs", input, &format!("matrix {}", input), &[])?;
    Ok(hits.len().to_string())
}

fn task(input: &str) -> Attempt {
    let opts = tasks::Options { delay: Some(Duration::from_secs(3600)), ..Default::default() };
    let t = tasks::enqueue("noop", input.as_bytes(), &opts)?;
    Ok(tasks::status(&t.id)?.state)
}

fn fetch(_: &str) -> Attempt {
    let r = http::fetch(&http::Request::get(&config("url")?).timeout(Duration::from_secs(5)))?;
    Ok(format!("{} {}", r.status, r.text()?))
}

fn keep(_: &str) -> Attempt {
    let item = media::put(config("pdf")?.as_bytes(), "application/pdf")?;
    let info = media::info(&item.id)?;
    Ok(format!("{} {}", info.media_type, info.size))
}

fn complete(_: &str) -> Attempt {
    Ok(ai::complete("small-chat", &[ai::Message::user("say matrix")], &ai::Options::default())?.text)
}

/// Reads the granted file with std::fs: wasi-libc finds the path under
/// the directory the host preopened for the grant.
fn file(_: &str) -> Attempt {
    Ok(std::fs::read_to_string(config("file")?)?.trim().to_string())
}

const FAMILIES: [(&str, fn(&str) -> Attempt); 10] = [
    ("log", log),
    ("config", greeting),
    ("kv", key_value),
    ("db", documents),
    ("knowledge", search),
    ("tasks", task),
    ("http", fetch),
    ("media", keep),
    ("ai", complete),
    ("files", file),
];

fn all(input: &[u8]) -> moat::Result<String> {
    let input = std::str::from_utf8(input)?;
    let mut out = String::new();
    for (family, attempt) in FAMILIES {
        match attempt(input) {
            Ok(value) => out.push_str(format!("{} ok {}", family, value).trim_end()),
            Err(e) => out.push_str(&format!("{} err {}", family, e)),
        }
        out.push('\n');
    }
    Ok(out)
}

fn noop(input: &[u8]) -> moat::Result<Vec<u8>> {
    Ok(input.to_vec())
}

moat::actions! {
    "all" => all,
    "noop" => noop,
}
