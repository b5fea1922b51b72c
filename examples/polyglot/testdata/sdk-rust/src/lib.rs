//! The Rust SDK's conformance fixture: one action per part of the SDK,
//! driven by examples/polyglot's TestSDK with the same table as the C and
//! AssemblyScript fixtures.

fn split(s: &str) -> (&str, &str) {
    s.split_once(' ').unwrap_or((s, ""))
}

/// "put KEY VALUE", "get KEY", "del KEY", "list PREFIX".
fn kv(input: &[u8]) -> moat::Result<Vec<u8>> {
    let (cmd, rest) = split(std::str::from_utf8(input)?);
    let (key, value) = split(rest);
    Ok(match cmd {
        "put" => {
            moat::kv::put(key, value.as_bytes())?;
            b"ok".to_vec()
        }
        "get" => moat::kv::get(key)?.unwrap_or_else(|| b"<not found>".to_vec()),
        "del" => if moat::kv::delete(key)? { "deleted" } else { "<not found>" }.into(),
        "list" => moat::kv::list(rest)?.join("\n").into_bytes(),
        _ => return Err(moat::Error::new(moat::code::INVALID_ARGUMENT, format!("unknown kv command {}", cmd))),
    })
}

/// "LEVEL message" logs with the field k=v.
fn log(input: &[u8]) -> moat::Result<&'static str> {
    let (level, msg) = split(std::str::from_utf8(input)?);
    moat::log::write(level, msg, &[("k", "v".into())])?;
    Ok("ok")
}

/// The value of the key in the input, or not_found.
fn config(input: &[u8]) -> moat::Result<String> {
    let key = std::str::from_utf8(input)?;
    moat::config::get(key)?.ok_or_else(|| moat::Error::new(moat::code::NOT_FOUND, format!("no config key {}", key)))
}

/// "OP JSON" runs any op and returns its raw reply.
fn call(input: &[u8]) -> moat::Result<String> {
    let (op, req) = split(std::str::from_utf8(input)?);
    moat::call(op, req)
}

/// "CODE message" fails with that code.
fn fail(input: &[u8]) -> moat::Result<Vec<u8>> {
    let (code, msg) = split(std::str::from_utf8(input)?);
    Err(moat::Error::new(code, msg))
}

fn echo(input: &[u8]) -> moat::Result<Vec<u8>> {
    Ok(input.to_vec())
}

/// A panic aborts the instance; the default hook prints the message.
fn trap(input: &[u8]) -> moat::Result<Vec<u8>> {
    panic!("{}", String::from_utf8_lossy(input))
}

// ---- db, knowledge, task: the same commands in every fixture -----------

use moat::json::Value;

/// Splits the input into at most `n` words at spaces, the last taking the rest.
fn words(input: &[u8], n: usize) -> moat::Result<Vec<&str>> {
    Ok(std::str::from_utf8(input)?.splitn(n, ' ').collect())
}

fn int(s: &str) -> moat::Result<i64> {
    Ok(s.parse::<i64>()?)
}

fn title_of(doc: &moat::db::Doc) -> moat::Result<String> {
    Ok(doc.object()?.get_string("title")?.unwrap_or_default())
}

/// "insert MODEL N TAGS TITLE", "get MODEL ID", "query MODEL TAG",
/// "update MODEL ID VERSION TITLE", "stale MODEL ID", "hostile MODEL",
/// "delete MODEL ID VERSION".
fn db(input: &[u8]) -> moat::Result<String> {
    use moat::db::{self, op, Change, Query};
    let a = words(input, 5)?;
    let out = match (a[0], a.len()) {
        ("insert", 5) => {
            let tags: Vec<&str> = a[3].split(',').collect();
            let doc = Value::object([
                ("title", a[4].into()),
                ("n", int(a[2])?.into()),
                ("tags", tags.into()),
                ("done", false.into()),
                ("body", "b".into()),
            ]);
            let ins = db::insert(a[1], &doc)?;
            Value::object([("id", ins.id.into()), ("version", ins.version.into())])
        }
        ("get", 3) => match db::get(a[1], a[2])? {
            None => Value::object([("found", false.into())]),
            Some(d) => Value::object([
                ("found", true.into()),
                ("id", d.id.clone().into()),
                ("version", d.version.into()),
                ("owner", d.owner.clone().into()),
                ("created", d.created.clone().into()),
                ("updated", d.updated.clone().into()),
                ("title", title_of(&d)?.into()),
                ("doc", Value::raw(d.json)?),
            ]),
        },
        ("query", 3) => {
            let q = Query::new().filter("tags", op::CONTAINS, a[2]).filter("done", op::EQ, false).filter("n", op::IN, vec![1, 2, 3, 5, 8]).order("-n").limit(2);
            let (mut titles, mut pages, mut after) = (Vec::new(), 0, None::<String>);
            loop {
                let q = match &after {
                    Some(c) => q.clone().after(c),
                    None => q.clone(),
                };
                let page = db::query(a[1], &q)?;
                pages += 1;
                for d in &page.docs {
                    titles.push(title_of(d)?);
                }
                after = page.next;
                if after.is_none() {
                    break;
                }
            }
            let count = db::count(a[1], &q.conds)?;
            Value::object([("titles", titles.into()), ("pages", Value::from(pages)), ("count", count.into())])
        }
        ("update", 5) => {
            let version = db::update(a[1], a[2], &Change::new().set("title", a[4]).set("done", true).unset("body").version(int(a[3])?))?;
            Value::object([("version", version.into())])
        }
        ("stale", 3) => {
            // Read, write back with the version read, then write again with
            // that (now stale) version: the conflict reaches this code as
            // the error's code.
            let d = db::get(a[1], a[2])?.ok_or_else(|| moat::Error::new(moat::code::NOT_FOUND, format!("no document {}", a[2])))?;
            let n = d.object()?.get_i64("n")?.unwrap_or(0);
            let change = Change::new().set("n", n + 1).version(d.version);
            let v1 = db::update(a[1], a[2], &change)?;
            match db::update(a[1], a[2], &change) {
                Ok(_) => return Err(moat::Error::guest(format!("an update at stale version {} was accepted", d.version))),
                Err(e) if e.is(moat::code::CONFLICT) => Value::object([("code", e.code().into()), ("version", v1.into())]),
                Err(e) => return Err(e),
            }
        }
        ("hostile", 2) => {
            // JSON the SDK must refuse before anything is sent: a number
            // with no JSON form, and text that would add members to the
            // request around the document.
            let code = |r: moat::Result<db::Inserted>| match r {
                Ok(_) => "accepted".to_string(),
                Err(e) => e.code().to_string(),
            };
            let nan = code(db::insert(a[1], &Value::object([("n", f64::NAN.into())])));
            let smuggled = code(Value::raw(r#"{"title":"x"}, "model": "secrets""#).and_then(|doc| db::insert(a[1], &doc)));
            Value::object([("nan", nan.into()), ("smuggled", smuggled.into())])
        }
        ("delete", 4) => Value::object([("deleted", db::delete(a[1], a[2], int(a[3])?)?.into())]),
        _ => return Err(moat::Error::new(moat::code::INVALID_ARGUMENT, format!("unknown db command {:?}", a))),
    };
    out.to_json()
}

/// "add COLL ID LANG TEXT", "search COLL LANG QUERY" (LANG - for no
/// filter), "delete COLL ID".
fn knowledge(input: &[u8]) -> moat::Result<String> {
    use moat::knowledge::{self, Search};
    let search = input.starts_with(b"search ");
    let a = words(input, if search { 4 } else { 5 })?;
    let out = match (a[0], a.len()) {
        ("add", 5) => Value::object([("replaced", knowledge::add(a[1], a[2], a[4], &[("lang", a[3].into()), ("len", (a[4].len() as i64).into())])?.into())]),
        ("search", 4) => {
            let mut opts = Search::new().limit(5);
            if a[2] != "-" {
                opts = opts.filter("lang", a[2]);
            }
            let mut hits = Vec::new();
            for h in knowledge::search(a[1], a[3], &opts)? {
                let lang = h.meta()?.get_string("lang")?.unwrap_or_default();
                hits.push(Value::object([("id", h.id.into()), ("lang", lang.into()), ("snippet", h.snippet.into()), ("scored", (h.score > 0.0).into())]));
            }
            Value::object([("hits", Value::Array(hits))])
        }
        ("delete", 3) => Value::object([("deleted", knowledge::delete(a[1], a[2])?.into())]),
        _ => return Err(moat::Error::new(moat::code::INVALID_ARGUMENT, format!("unknown knowledge command {:?}", a))),
    };
    out.to_json()
}

/// A delay as the fixtures write it: a number and s, m, h or d.
fn delay(s: &str) -> moat::Result<std::time::Duration> {
    let unit = match s.chars().last() {
        Some('s') => 1,
        Some('m') => 60,
        Some('h') => 3600,
        Some('d') => 86400,
        _ => return Err(moat::Error::new(moat::code::INVALID_ARGUMENT, format!("delay {:?}: want a number and s, m, h or d", s))),
    };
    Ok(std::time::Duration::from_secs(s[..s.len() - 1].parse::<u64>()? * unit))
}

/// "enqueue ACTION KEY DELAY INPUT" (KEY, DELAY - for none; two attempts),
/// "status ID", "cancel ID".
fn task(input: &[u8]) -> moat::Result<String> {
    use moat::tasks::{self, Options};
    let a = words(input, 5)?;
    let out = match (a[0], a.len()) {
        ("enqueue", 4) | ("enqueue", 5) => {
            let opts = Options {
                delay: if a[3] == "-" { None } else { Some(delay(a[3])?) },
                max_attempts: 2,
                key: if a[2] == "-" { None } else { Some(a[2].to_string()) },
                ..Default::default()
            };
            let t = tasks::enqueue(a[1], a.get(4).unwrap_or(&"").as_bytes(), &opts)?;
            Value::object([("id", t.id.into()), ("existing", t.existing.into())])
        }
        ("status", 2) => {
            let st = tasks::status(a[1])?;
            Value::object([
                ("state", st.state.into()),
                ("attempts", st.attempts.into()),
                ("max_attempts", st.max_attempts.into()),
                ("result", String::from_utf8(st.result)?.into()),
                ("error", st.error.into()),
                ("code", st.code.into()),
                ("run_at", st.run_at.into()),
            ])
        }
        ("cancel", 2) => {
            let c = tasks::cancel(a[1])?;
            Value::object([("cancelled", c.cancelled.into()), ("state", c.state.into())])
        }
        _ => return Err(moat::Error::new(moat::code::INVALID_ARGUMENT, format!("unknown task command {:?}", a))),
    };
    out.to_json()
}

moat::actions! {
    "kv" => kv,
    "log" => log,
    "config" => config,
    "call" => call,
    "fail" => fail,
    "echo" => echo,
    "trap" => trap,
    "db" => db,
    "knowledge" => knowledge,
    "task" => task,
}
