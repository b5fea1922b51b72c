//! Background runs of this module's own actions. A task runs later, on
//! whichever host claims it, as the principal whose invocation enqueued
//! it; failures are retried with backoff up to its `max_attempts`. The
//! module needs `capabilities: {tasks: true}`.
//!
//! ```ignore
//! let t = moat::tasks::enqueue("resize", b"photo-17", &moat::tasks::Options { key: Some("photo-17".into()), ..Default::default() })?;
//! let st = moat::tasks::status(&t.id)?;
//! if st.state == moat::tasks::DONE { /* st.result is the action's output */ }
//! ```
//!
//! A task runs at least once: a host that dies mid-run leaves it to run
//! again, so make the action safe to repeat. Limits are those of
//! `abi/task.go` in the moat repository.

use crate::json::{self, base64, Object};
use crate::{code, transport, Error, Result};
use std::time::Duration;

/// Waiting for a runner.
pub const QUEUED: &str = "queued";
/// An attempt is in flight.
pub const RUNNING: &str = "running";
/// An attempt succeeded; the status holds its output.
pub const DONE: &str = "done";
/// The last attempt failed (or a failure no retry can fix).
pub const FAILED: &str = "failed";
/// Cancelled before it finished.
pub const CANCELLED: &str = "cancelled";

/// An enqueue's options; the default runs the task as soon as a runner
/// is free, with 3 attempts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Run this long from now (at most 30 days). At most one of `delay`
    /// and `at`.
    pub delay: Option<Duration>,
    /// Run at this RFC 3339 time (a time past runs at once).
    pub at: Option<String>,
    /// 1 to 25 (0: 3).
    pub max_attempts: u32,
    /// Makes the enqueue idempotent: while a task of this module and
    /// organization holds the key, enqueue returns that task.
    pub key: Option<String>,
}

/// A task's id, and whether its key named a task enqueued before (then
/// nothing new was queued).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The task's id.
    pub id: String,
    /// The key named a task enqueued before.
    pub existing: bool,
}

/// A duration in Go's syntax, which the host reads.
fn go_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

/// Queues a run of `action` with `input`.
pub fn enqueue(action: &str, input: &[u8], opts: &Options) -> Result<Enqueued> {
    let mut req = vec![("action", json::string(action))];
    if !input.is_empty() {
        req.push(("input", json::string(&base64::encode(input))));
    }
    if let Some(d) = opts.delay {
        req.push(("delay", json::string(&go_duration(d))));
    }
    if let Some(at) = &opts.at {
        req.push(("at", json::string(at)));
    }
    if opts.max_attempts > 0 {
        req.push(("max_attempts", opts.max_attempts.to_string()));
    }
    if let Some(key) = &opts.key {
        req.push(("key", json::string(key)));
    }
    transport::round_trip("task.enqueue", json::object(&req).as_bytes(), |body| {
        let o = Object::parse(body, "task.enqueue")?;
        let id = o.get_string("id")?.filter(|id| !id.is_empty()).ok_or_else(|| Error::new(code::INTERNAL, "task.enqueue: the reply has no id"))?;
        Ok(Enqueued { id, existing: o.get_bool("existing")? })
    })
}

/// A task's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// [`QUEUED`], [`RUNNING`], [`DONE`], [`FAILED`] or [`CANCELLED`].
    pub state: String,
    /// Attempts started.
    pub attempts: u32,
    /// The most attempts.
    pub max_attempts: u32,
    /// Done: the output of the attempt that succeeded.
    pub result: Vec<u8>,
    /// The last failure, and its ABI code.
    pub error: String,
    /// The code of `error`.
    pub code: String,
    /// Queued: when it runs next (RFC 3339).
    pub run_at: String,
}

/// The state of the task `id` of this module. An id of no task of this
/// module and organization fails with [`code::NOT_FOUND`].
pub fn status(id: &str) -> Result<Status> {
    let req = json::object(&[("id", json::string(id))]);
    transport::round_trip("task.status", req.as_bytes(), |body| {
        let o = Object::parse(body, "task.status")?;
        let count = |key: &str| -> Result<u32> { Ok(o.get_i64(key)?.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32) };
        let result = match o.get_string("result")? {
            Some(enc) => base64::decode(enc.as_bytes()).ok_or_else(|| Error::new(code::INTERNAL, "task.status: the result is not base64"))?,
            None => Vec::new(),
        };
        Ok(Status {
            state: o.get_string("state")?.ok_or_else(|| Error::new(code::INTERNAL, "task.status: the reply has no state"))?,
            attempts: count("attempts")?,
            max_attempts: count("max_attempts")?,
            result,
            error: o.get_string("error")?.unwrap_or_default(),
            code: o.get_string("code")?.unwrap_or_default(),
            run_at: o.get_string("run_at")?.unwrap_or_default(),
        })
    })
}

/// What a cancel did: `cancelled` when the task was queued or running and
/// is now cancelled; `state` is its state after the call either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// The task is now cancelled.
    pub cancelled: bool,
    /// Its state.
    pub state: String,
}

/// Cancels the task `id` of this module if it is queued or running.
pub fn cancel(id: &str) -> Result<Cancelled> {
    let req = json::object(&[("id", json::string(id))]);
    transport::round_trip("task.cancel", req.as_bytes(), |body| {
        let o = Object::parse(body, "task.cancel")?;
        Ok(Cancelled { cancelled: o.get_bool("cancelled")?, state: o.get_string("state")?.unwrap_or_default() })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_go_syntax() {
        assert_eq!(go_duration(Duration::from_secs(3600)), "3600s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500000000ns");
    }

    #[test]
    fn requests_and_replies() {
        use crate::transport::fake;
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
        let s = seen.clone();
        fake::set(Some(Box::new(move |op, req| {
            s.borrow_mut().push(String::from_utf8(req.to_vec()).unwrap());
            match op {
                "task.enqueue" => (0, br#"{"id":"t1","existing":true}"#.to_vec()),
                "task.status" => (0, br#"{"state":"done","attempts":1,"max_attempts":2,"result":"aGk="}"#.to_vec()),
                _ => (1, br#"{"code":"not_found","message":"no task x"}"#.to_vec()),
            }
        })));
        let opts = Options { delay: Some(Duration::from_secs(90)), max_attempts: 2, key: Some("k\"1".into()), ..Default::default() };
        assert_eq!(enqueue("work", b"hi", &opts).unwrap(), Enqueued { id: "t1".into(), existing: true });
        assert_eq!(seen.borrow()[0], r#"{"action":"work","input":"aGk=","delay":"90s","max_attempts":2,"key":"k\"1"}"#);
        let st = status("t1").unwrap();
        assert_eq!((st.state.as_str(), st.attempts, st.max_attempts, st.result.as_slice()), (DONE, 1, 2, &b"hi"[..]));
        assert!(cancel("x").unwrap_err().is(code::NOT_FOUND));
        fake::set(None);
    }
}
