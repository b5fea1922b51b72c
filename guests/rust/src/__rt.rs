//! The runtime behind [`actions!`](crate::actions): the state and logic of
//! the four exports. Not a public API; the macro calls it.

use crate::{code, json, transport, Error, Result};
use std::cell::RefCell;

/// An action handler after the macro has converted its output.
pub type Handler = fn(&[u8]) -> Result<Vec<u8>>;

const FAILED: u32 = 1 << 31;

#[derive(Default)]
struct State {
    /// The action list handed to the host; once built, it never changes.
    list: Option<Vec<u8>>,
    /// The buffer moat_alloc hands out for the next input.
    input: Vec<u8>,
    /// The last invocation's output (or encoded error): the host reads it
    /// after moat_invoke returns, so it lives until the next invocation.
    output: Vec<u8>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn pack(ptr: *const u8, len: usize) -> u64 {
    (ptr as usize as u64) << 32 | len as u32 as u64
}

/// moat_actions: "name\nname\n...", built once.
pub fn actions(names: &[&str]) -> u64 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let list = s.list.get_or_insert_with(|| {
            let mut l = Vec::new();
            for n in names {
                // A name with a newline would split in two on the host.
                assert!(!n.is_empty() && !n.contains('\n'), "moat::actions!: invalid action name {:?}", n);
                l.extend_from_slice(n.as_bytes());
                l.push(b'\n');
            }
            l
        });
        pack(list.as_ptr(), list.len())
    })
}

/// moat_alloc: a buffer of `size` bytes for the host to write the input to.
pub fn alloc(size: u32) -> u32 {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.input.clear();
        s.input.resize(size as usize, 0);
        s.input.as_ptr() as usize as u32
    })
}

/// moat_invoke: runs the handler at `action` on the input at [ptr, +len),
/// which must lie in the buffer moat_alloc returned.
pub fn invoke(handlers: &[Handler], action: u32, ptr: u32, len: u32) -> u64 {
    PANIC_HOOK.call_once(|| std::panic::set_hook(Box::new(panic_hook)));
    // The input is taken out of the state while the handler runs, so the
    // handler may use ops (and the state's cell is not borrowed).
    let input = STATE.with(|s| std::mem::take(&mut s.borrow_mut().input));
    // Addresses are 32-bit on wasm32; off the target (unit tests) they are
    // truncated alike, which keeps the offset arithmetic right. An address
    // below the buffer wraps around to a huge offset and is refused.
    let off = ptr.wrapping_sub(input.as_ptr() as usize as u32);
    let result = match handlers.get(action as usize) {
        None => Err(Error::new("no_such_action", format!("no action at index {}; the module has {} actions", action, handlers.len()))),
        Some(_) if len > 0 && u64::from(off) + u64::from(len) > input.len() as u64 => Err(Error::new(
            code::INVALID_ARGUMENT,
            format!("moat_invoke: input [{}, +{}) is not inside the buffer returned by moat_alloc", ptr, len),
        )),
        Some(h) => h(if len == 0 { &[] } else { &input[off as usize..off as usize + len as usize] }),
    };
    let (out, failed) = match result {
        Ok(out) if out.len() > (FAILED - 1) as usize => {
            (encode_error(&Error::new("output_too_large", format!("output is {} bytes; the ABI allows at most {}", out.len(), FAILED - 1))), true)
        }
        Ok(out) => (out, false),
        Err(e) => (encode_error(&e), true),
    };
    transport::release_large_buffers();
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if input.capacity() <= transport::MAX_RETAINED {
            s.input = input;
        }
        s.output = out;
        pack(s.output.as_ptr(), s.output.len()) | if failed { u64::from(FAILED) } else { 0 }
    })
}

static PANIC_HOOK: std::sync::Once = std::sync::Once::new();

/// Prints a panic as one line on stderr. A panic aborts the instance (wasm32
/// has no unwinding); the host puts the last line of the guest's stderr in
/// the trap it reports, and the default hook's last line is a note about
/// RUST_BACKTRACE, not the message.
fn panic_hook(info: &std::panic::PanicInfo<'_>) {
    let msg = info.to_string().replace('\n', " ");
    eprintln!("moat: action {}", msg);
}

fn encode_error(e: &Error) -> Vec<u8> {
    json::object(&[("code", json::string(e.code())), ("message", json::string(e.message()))]).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::base64;
    use crate::transport::fake;

    fn greet(input: &[u8]) -> Result<Vec<u8>> {
        let name = std::str::from_utf8(input)?;
        let greeting = crate::config::get("greeting")?.unwrap_or_else(|| "Hello".into());
        crate::info!("greeting", name = name, n = 1, ok = true);
        let n = match crate::kv::get("count")? {
            Some(v) => std::str::from_utf8(&v)?.parse::<u64>()? + 1,
            None => 1,
        };
        crate::kv::put("count", n.to_string().as_bytes())?;
        Ok(format!("{}, {}! (call #{})", greeting, name, n).into_bytes())
    }

    fn run(action: u32, input: &[u8]) -> (String, bool) {
        // The host's part: alloc, write the input, invoke.
        let ptr = alloc(input.len() as u32);
        STATE.with(|s| s.borrow_mut().input.copy_from_slice(input));
        let v = invoke(&[greet], action, ptr, input.len() as u32);
        let out = STATE.with(|s| String::from_utf8(s.borrow().output.clone()).unwrap());
        (out, v & u64::from(FAILED) != 0)
    }

    #[test]
    fn greet_through_a_fake_host() {
        let store = std::rc::Rc::new(RefCell::new(std::collections::HashMap::<String, String>::new()));
        let logs = std::rc::Rc::new(RefCell::new(Vec::<String>::new()));
        let (st, lg) = (store.clone(), logs.clone());
        let big = "x".repeat(20_000); // larger than the first response buffer
        fake::set(Some(Box::new(move |op, req| {
            let req = String::from_utf8(req.to_vec()).unwrap();
            let o = json::Object::parse(req.as_bytes(), "req").unwrap();
            match op {
                "config.get" => (0, format!(r#"{{"value":{},"found":true}}"#, json::string(&big)).into_bytes()),
                "log.write" => {
                    lg.borrow_mut().push(req.clone());
                    (0, b"{}".to_vec())
                }
                "kv.get" => match st.borrow().get(&o.get_string("key").unwrap().unwrap()) {
                    Some(v) => (0, format!(r#"{{"value":"{}","found":true}}"#, v).into_bytes()),
                    None => (0, br#"{"found":false}"#.to_vec()),
                },
                "kv.put" => {
                    st.borrow_mut().insert(o.get_string("key").unwrap().unwrap(), o.get_string("value").unwrap().unwrap());
                    (0, b"{}".to_vec())
                }
                _ => (1, br#"{"code":"unknown_op","message":"no such op"}"#.to_vec()),
            }
        })));
        assert_eq!(actions(&["greet"]), pack(STATE.with(|s| s.borrow().list.as_ref().unwrap().as_ptr()), 6));
        let (out, failed) = run(0, b"World");
        assert!(!failed, "{}", out);
        assert_eq!(out, format!("{}, World! (call #1)", "x".repeat(20_000)));
        assert_eq!(run(0, b"World").0, format!("{}, World! (call #2)", "x".repeat(20_000)));
        assert_eq!(store.borrow().get("count").map(String::as_str), Some("Mg==")); // "2"
        assert_eq!(logs.borrow()[0], r#"{"level":"info","message":"greeting","fields":{"name":"World","n":1,"ok":true}}"#);

        store.borrow_mut().insert("count".into(), base64::encode(b"abc"));
        let (out, failed) = run(0, b"World");
        assert!(failed);
        assert_eq!(out, r#"{"code":"guest_error","message":"invalid digit found in string"}"#);
        let (out, failed) = run(3, b"");
        assert!(failed && out.contains(r#""code":"no_such_action""#), "{}", out);
        assert!(run(0, b"").1); // an empty input is valid UTF-8 (""), but the count is still "abc"
        store.borrow_mut().remove("count");
        let ptr = alloc(4);
        let v = invoke(&[greet], 0, ptr.wrapping_sub(1), 4); // not inside the input buffer
        assert!(v & u64::from(FAILED) != 0);
        let (out, failed) = run(0, b"\xff");
        assert!(failed && out.contains("utf-8"), "{}", out);
        fake::set(None);
        let (out, failed) = run(0, b"x");
        assert!(failed && out.contains(r#""code":"unavailable""#), "{}", out);
    }

    #[test]
    fn errors_keep_their_code() {
        fake::set(Some(Box::new(|_, _| (1, br#"{"code":"denied","message":"op kv.get: no \"kv\""}"#.to_vec()))));
        let e = crate::kv::get("k").unwrap_err();
        assert!(e.is(code::DENIED));
        assert_eq!(e.message(), "op kv.get: no \"kv\"");
        fake::set(Some(Box::new(|_, _| (1, b"garbage".to_vec()))));
        assert!(crate::kv::delete("k").unwrap_err().is(code::INTERNAL));
        fake::set(Some(Box::new(|_, _| (0, br#"{"keys":["a","b"],"more":false}"#.to_vec()))));
        assert_eq!(crate::kv::list("").unwrap(), vec!["a", "b"]);
        fake::set(None);
    }
}
