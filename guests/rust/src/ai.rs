//! Model calls through the providers the operator configured
//! (OpenAI-compatible APIs: hosted ones, vLLM, llama.cpp's server,
//! Ollama). A module names models by the operator's aliases and reaches
//! only those its grants name (`capabilities: {ai: [small-chat]}`).
//!
//! ```ignore
//! use moat::ai::{self, Message};
//! let c = ai::complete("small-chat", &[Message::system("Answer in one sentence."), Message::user(question)],
//!     &ai::Options { max_tokens: 200, ..Default::default() })?;
//! // c.text, c.usage.input_tokens, c.model_call_id (the audit trail's id)
//! let e = ai::embed("small-embed", &["a text", "another"])?; // e.vectors: Vec<Vec<f32>>
//! ```
//!
//! Token budgets per organization and per module per day are checked
//! before each call: one over a budget fails with `denied`, naming it.
//! Every call is audited as a model call, with the id the reply carries
//! and the invocation's correlation id. Limits are those of `abi/ai.go` in
//! the moat repository.

use crate::json::{self, Object, Value};
use crate::{code, transport, Error, Result};

/// The role of the message that sets a conversation's rules.
pub const SYSTEM: &str = "system";
/// The role of the user's messages.
pub const USER: &str = "user";
/// The role of the model's messages.
pub const ASSISTANT: &str = "assistant";

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// [`SYSTEM`], [`USER`] or [`ASSISTANT`].
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message of `role`.
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message { role: role.to_string(), content: content.into() }
    }
    /// The message that sets the conversation's rules.
    pub fn system(content: impl Into<String>) -> Message {
        Message::new(SYSTEM, content)
    }
    /// A message of the user's.
    pub fn user(content: impl Into<String>) -> Message {
        Message::new(USER, content)
    }
    /// A message of the model's, for a conversation's history.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::new(ASSISTANT, content)
    }
}

/// A completion's options; the default leaves everything to the
/// provider's defaults (capped by the operator).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// The most tokens of reply, 1 to 32768 (0: the provider's default).
    pub max_tokens: u32,
    /// 0 to 2 (`None`: the provider's default).
    pub temperature: Option<f64>,
    /// A JSON Schema object: the reply is JSON matching it (the host
    /// checks it is JSON).
    pub json_schema: Option<Value>,
}

/// What a call cost, in the provider's tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the prompt.
    pub input_tokens: i64,
    /// Tokens of the reply.
    pub output_tokens: i64,
}

/// A model's reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The reply (JSON when the call set a schema).
    pub text: String,
    /// What it cost.
    pub usage: Usage,
    /// The model call's id in the audit trail.
    pub model_call_id: String,
}

/// One vector per input, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Embedding {
    /// The vectors.
    pub vectors: Vec<Vec<f32>>,
    /// What it cost.
    pub usage: Usage,
    /// The model call's id in the audit trail.
    pub model_call_id: String,
}

fn usage(op: &str, o: &Object<'_>) -> Result<(Usage, String)> {
    let mut u = Usage::default();
    if let Some(raw) = o.get_object("usage")? {
        let uo = Object::parse(raw.as_bytes(), op)?;
        u.input_tokens = uo.get_i64("input_tokens")?.unwrap_or(0);
        u.output_tokens = uo.get_i64("output_tokens")?.unwrap_or(0);
    }
    let id = o.get_string("model_call_id")?.filter(|s| !s.is_empty());
    Ok((u, id.ok_or_else(|| Error::new(code::INTERNAL, format!("{}: the reply has no model_call_id", op)))?))
}

/// Asks `model` (an operator's alias) to continue `messages`.
pub fn complete(model: &str, messages: &[Message], opts: &Options) -> Result<Completion> {
    let msgs: Vec<String> = messages.iter().map(|m| json::object(&[("role", json::string(&m.role)), ("content", json::string(&m.content))])).collect();
    let mut req = vec![("model", json::string(model)), ("messages", format!("[{}]", msgs.join(",")))];
    if opts.max_tokens > 0 {
        req.push(("max_tokens", opts.max_tokens.to_string()));
    }
    if let Some(t) = opts.temperature {
        let t = Value::Float(t).to_json().map_err(|e| Error::new(e.code(), format!("ai.complete: temperature: {}", e.message())))?;
        req.push(("temperature", t));
    }
    if let Some(schema) = &opts.json_schema {
        if !schema.is_object() {
            return Err(Error::new(code::INVALID_ARGUMENT, "ai.complete: json_schema is not a JSON object"));
        }
        req.push(("json_schema", schema.to_json().map_err(|e| Error::new(e.code(), format!("ai.complete: json_schema: {}", e.message())))?));
    }
    transport::round_trip("ai.complete", json::object(&req).as_bytes(), |body| {
        let o = Object::parse(body, "ai.complete")?;
        let text = o.get_string("text")?.ok_or_else(|| Error::new(code::INTERNAL, "ai.complete: the reply has no text"))?;
        let (usage, model_call_id) = usage("ai.complete", &o)?;
        Ok(Completion { text, usage, model_call_id })
    })
}

/// A JSON number as an f32; None for anything else.
fn number(raw: &[u8]) -> Option<f32> {
    let t = std::str::from_utf8(raw).ok()?;
    if !(t.starts_with('-') || t.starts_with(|c: char| c.is_ascii_digit())) || !json::valid(t) {
        return None;
    }
    t.parse::<f32>().ok()
}

/// Asks `model` (an operator's alias) for one vector per input.
pub fn embed<S: AsRef<str>>(model: &str, input: &[S]) -> Result<Embedding> {
    let inputs: Vec<String> = input.iter().map(|s| json::string(s.as_ref())).collect();
    let req = json::object(&[("model", json::string(model)), ("input", format!("[{}]", inputs.join(",")))]);
    transport::round_trip("ai.embed", req.as_bytes(), |body| {
        let o = Object::parse(body, "ai.embed")?;
        let bad = |what: &str| Error::new(code::INTERNAL, format!("ai.embed: {}", what));
        let raw = o.get_raw("vectors").ok_or_else(|| bad("the reply has no vectors"))?;
        let mut vectors = Vec::new();
        for v in json::elements(raw, "ai.embed")? {
            let nums = json::elements(v, "ai.embed")?;
            let vec: Option<Vec<f32>> = nums.iter().map(|n| number(n)).collect();
            vectors.push(vec.ok_or_else(|| bad("a vector holds something other than numbers"))?);
        }
        if vectors.len() != input.len() {
            return Err(bad(&format!("{} inputs but the reply has {} vectors", input.len(), vectors.len())));
        }
        let (usage, model_call_id) = usage("ai.embed", &o)?;
        Ok(Embedding { vectors, usage, model_call_id })
    })
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
            let req = String::from_utf8(req.to_vec()).unwrap();
            s.borrow_mut().push(req.clone());
            if req.contains("big-chat") {
                return (1, br#"{"code":"denied","message":"the token budget of organization acme for today is spent"}"#.to_vec());
            }
            if op == "ai.embed" {
                if req.contains("short") {
                    return (0, br#"{"vectors":[[1]],"model_call_id":"m"}"#.to_vec());
                }
                return (0, br#"{"vectors":[[0.5,-0.25,1e-3],[1,2,3]],"usage":{"input_tokens":4,"output_tokens":0},"model_call_id":"mc-2"}"#.to_vec());
            }
            if req.contains("nocall") {
                return (0, br#"{"text":"x","usage":{}}"#.to_vec());
            }
            (0, r#"{"text":"hello \u00fc","usage":{"input_tokens":12,"output_tokens":3},"model_call_id":"mc-1"}"#.as_bytes().to_vec())
        })));
        let opts = Options { max_tokens: 64, temperature: Some(0.25), json_schema: None };
        let c = complete("small-chat", &[Message::system("Be brief."), Message::user("hi \"there\"")], &opts).unwrap();
        assert_eq!(c, Completion { text: "hello ü".into(), usage: Usage { input_tokens: 12, output_tokens: 3 }, model_call_id: "mc-1".into() });
        assert_eq!(
            seen.borrow()[0],
            r#"{"model":"small-chat","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi \"there\""}],"max_tokens":64,"temperature":0.25}"#
        );
        let schema = Value::object([("type", "object".into())]);
        complete("small-chat", &[], &Options { temperature: Some(0.0), json_schema: Some(schema), ..Default::default() }).unwrap();
        assert_eq!(seen.borrow()[1], r#"{"model":"small-chat","messages":[],"temperature":0,"json_schema":{"type":"object"}}"#, "a zero temperature is sent");
        let n = seen.borrow().len();
        assert!(complete("small-chat", &[], &Options { temperature: Some(f64::NAN), ..Default::default() }).unwrap_err().is(code::INVALID_ARGUMENT));
        let not_object = Options { json_schema: Some(Value::raw("[1]").unwrap()), ..Default::default() };
        assert!(complete("small-chat", &[], &not_object).unwrap_err().is(code::INVALID_ARGUMENT));
        assert_eq!(seen.borrow().len(), n, "refused options reached the host");
        assert!(complete("big-chat", &[], &Options::default()).unwrap_err().is(code::DENIED));
        assert!(complete("nocall", &[], &Options::default()).unwrap_err().is(code::INTERNAL), "a reply without its model call id");

        let e = embed("small-embed", &["a", "b \"c\""]).unwrap();
        assert_eq!(e.vectors, vec![vec![0.5, -0.25, 1e-3], vec![1.0, 2.0, 3.0]]);
        assert_eq!((e.usage.input_tokens, e.model_call_id.as_str()), (4, "mc-2"));
        assert!(seen.borrow().last().unwrap().ends_with(r#""input":["a","b \"c\""]}"#));
        assert!(embed("short", &["a", "b"]).unwrap_err().is(code::INTERNAL), "fewer vectors than inputs");
        assert_eq!(number(b"1e-3"), Some(1e-3));
        for bad in [&b"inf"[..], b"NaN", b"+1", b"\"1\"", b"1 2", b""] {
            assert_eq!(number(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        fake::set(None);
    }
}
