//! The Rust SDK's fixture of the http, media and ai wrappers, with the same
//! commands as every language's outside-* fixture, driven by
//! examples/polyglot's TestSDKOutside. Each action answers what the SDK
//! read back as JSON, written with `moat::json::Value`.

use moat::json::Value;
use moat::{ai, http, media};
use std::time::Duration;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{:02x}", x)).collect()
}

/// http: POST the URL in the input with a header and a binary body.
fn fetch(input: &[u8]) -> moat::Result<String> {
    let req = http::Request::new("POST", std::str::from_utf8(input)?)
        .header("X-Test", "sdk")
        .body(&b"\x00\xffhi"[..])
        .timeout(Duration::from_secs(5))
        .max_bytes(65536);
    let resp = http::fetch(&req)?;
    let out = Value::object([
        ("status", (resp.status as i64).into()),
        ("url", resp.url.as_str().into()),
        ("echo", resp.header("X-Echo").unwrap_or("").into()),
        ("body", hex(&resp.body).into()),
    ]);
    out.to_json()
}

fn info(i: &media::Info) -> Value {
    Value::object([
        ("id", i.id.as_str().into()),
        ("type", i.media_type.as_str().into()),
        ("size", (i.size as i64).into()),
        ("width", i.width.into()),
        ("height", i.height.into()),
    ])
}

/// media: keep the input (or fetch "fetch URL"), thumbnail it, describe
/// the thumbnail, read the item back.
fn store(input: &[u8]) -> moat::Result<String> {
    let item = match input.strip_prefix(b"fetch ") {
        Some(url) => media::fetch(std::str::from_utf8(url)?)?,
        None => media::put(input, "image/png")?,
    };
    let thumb = media::thumbnail(&item.id, 16, 16, media::Fit::Cover)?;
    let described = media::info(&thumb.id)?;
    let (got, data) = media::get(&item.id)?;
    let out = Value::object([
        ("item", info(&item)),
        ("thumb", info(&thumb)),
        ("info", info(&described)),
        (
            "got",
            Value::object([("id", got.id.as_str().into()), ("len", (data.len() as i64).into()), ("head", hex(&data[..data.len().min(8)]).into())]),
        ),
    ]);
    out.to_json()
}

fn with_usage(mut members: Vec<(&str, Value)>, u: ai::Usage, id: &str) -> moat::Result<String> {
    members.push(("input_tokens", u.input_tokens.into()));
    members.push(("output_tokens", u.output_tokens.into()));
    members.push(("model_call_id", id.into()));
    Value::object(members).to_json()
}

/// ai: "complete MODEL PROMPT", "json MODEL PROMPT", "embed MODEL TEXT".
fn model(input: &[u8]) -> moat::Result<String> {
    let s = std::str::from_utf8(input)?;
    let a: Vec<&str> = s.splitn(3, ' ').collect();
    if a.len() != 3 {
        return Err(moat::Error::new(moat::code::INVALID_ARGUMENT, "want CMD MODEL TEXT"));
    }
    let (cmd, name, text) = (a[0], a[1], a[2]);
    match cmd {
        "complete" => {
            let opts = ai::Options { max_tokens: 64, temperature: Some(0.25), json_schema: None };
            let c = ai::complete(name, &[ai::Message::system("Answer briefly."), ai::Message::user(text)], &opts)?;
            with_usage(vec![("text", c.text.as_str().into())], c.usage, &c.model_call_id)
        }
        "json" => {
            let schema = Value::object([
                ("type", "object".into()),
                ("properties", Value::object([("answer", Value::object([("type", "string".into())]))])),
                ("required", vec!["answer"].into()),
            ]);
            let c = ai::complete(name, &[ai::Message::user(text)], &ai::Options { json_schema: Some(schema), ..Default::default() })?;
            with_usage(vec![("text", c.text.as_str().into())], c.usage, &c.model_call_id)
        }
        "embed" => {
            let e = ai::embed(name, &[text, "moat"])?;
            let vectors: Vec<Value> = e.vectors.iter().map(|v| Value::Array(v.iter().map(|&x| Value::from(x)).collect())).collect();
            with_usage(vec![("vectors", Value::Array(vectors))], e.usage, &e.model_call_id)
        }
        _ => Err(moat::Error::new(moat::code::INVALID_ARGUMENT, format!("unknown ai command {}", cmd))),
    }
}

/// caller: who the invocation runs for (moat.caller), whatever the input
/// says.
fn whoami(_input: &[u8]) -> moat::Result<String> {
    let p = moat::caller()?;
    let admin = p.has_role("admin");
    Value::object([
        ("user", p.user.as_str().into()),
        ("org", p.org.as_str().into()),
        ("roles", p.roles.clone().into()),
        ("correlation_id", p.correlation_id.as_str().into()),
        ("admin", admin.into()),
    ])
    .to_json()
}

moat::actions! {
    "http" => fetch,
    "media" => store,
    "ai" => model,
    "caller" => whoami,
}
