//! The import transport: one crossing of `moat.call` per op (two when the
//! reply does not fit the buffer). Everything above `host_call` is plain
//! Rust, which the unit tests drive through a fake host on any target.

use crate::{code, json, Error, Result};
use std::cell::RefCell;

const STATUS_OK: u32 = 0;
const STATUS_ERROR: u32 = 1;
const STATUS_TOO_SMALL: u32 = 2;

/// The first size of the response buffer: large enough that almost every
/// reply arrives in one crossing. It grows to the largest reply seen.
const INITIAL_RESP: usize = 16 << 10;

/// Buffers that grew past this are dropped when an invocation ends.
pub(crate) const MAX_RETAINED: usize = 1 << 20;

thread_local! {
    // The reusable response buffer. A wasm32-wasi instance has one thread,
    // so this is one buffer per instance.
    static RESP: RefCell<Vec<u8>> = RefCell::new(Vec::new());
}

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "moat")]
extern "C" {
    #[link_name = "call"]
    fn moat_call(op_ptr: *const u8, op_len: u32, req_ptr: *const u8, req_len: u32, resp_ptr: *mut u8, resp_cap: u32) -> u64;
}

/// One crossing: the status and the reply length (or the size needed).
/// An empty op fetches the reply the host kept after STATUS_TOO_SMALL.
#[cfg(target_arch = "wasm32")]
fn host_call(op: &str, req: &[u8], resp: &mut [u8]) -> (u32, u32) {
    // SAFETY: the host reads op and req and writes at most resp.len()
    // bytes into resp, all inside this instance's linear memory.
    let v = unsafe { moat_call(op.as_ptr(), op.len() as u32, req.as_ptr(), req.len() as u32, resp.as_mut_ptr(), resp.len() as u32) };
    ((v >> 32) as u32, v as u32)
}

#[cfg(not(target_arch = "wasm32"))]
fn host_call(op: &str, req: &[u8], resp: &mut [u8]) -> (u32, u32) {
    fake::call(op, req, resp)
}

/// Sends one op and passes the reply body to decode. A STATUS_ERROR reply
/// becomes an [`Error`] with the host's code.
pub(crate) fn round_trip<T>(op: &str, req: &[u8], decode: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
    if op.is_empty() {
        // An empty op name means "fetch the pending reply" on the wire.
        return Err(Error::new(code::INVALID_ARGUMENT, "op name is empty"));
    }
    let body = RESP.with(|cell| -> Result<(u32, Vec<u8>)> {
        let mut resp = cell.borrow_mut();
        if resp.is_empty() {
            resp.resize(INITIAL_RESP, 0);
        }
        let (mut status, mut n) = host_call(op, req, &mut resp);
        if status == STATUS_TOO_SMALL {
            if n as usize <= resp.len() {
                return Err(Error::new(code::INTERNAL, format!("op {}: host asked for a {}-byte buffer but {} bytes were offered", op, n, resp.len())));
            }
            resp.resize(n as usize, 0);
            let r = host_call("", &[], &mut resp);
            status = r.0;
            n = r.1;
            if status == STATUS_TOO_SMALL {
                return Err(Error::new(code::INTERNAL, format!("op {}: host asked for a larger buffer twice", op)));
            }
        }
        if n as usize > resp.len() {
            return Err(Error::new(code::INTERNAL, format!("op {}: host reported a {}-byte reply in a {}-byte buffer", op, n, resp.len())));
        }
        Ok((status, resp[..n as usize].to_vec()))
    })?;
    match body.0 {
        STATUS_OK => decode(&body.1),
        STATUS_ERROR => Err(decode_error(op, &body.1)),
        s => Err(Error::new(code::INTERNAL, format!("op {}: host returned unknown status {}", op, s))),
    }
}

fn decode_error(op: &str, body: &[u8]) -> Error {
    if let Ok(o) = json::Object::parse(body, op) {
        if let Ok(Some(c)) = o.get_string("code") {
            if !c.is_empty() {
                return Error::new(&c, o.get_string("message").ok().flatten().unwrap_or_default());
            }
        }
    }
    Error::new(code::INTERNAL, format!("op {} failed with an undecodable error reply: {}", op, String::from_utf8_lossy(body)))
}

/// Drops a response buffer that grew past MAX_RETAINED.
pub(crate) fn release_large_buffers() {
    RESP.with(|cell| {
        let mut resp = cell.borrow_mut();
        if resp.capacity() > MAX_RETAINED {
            *resp = Vec::new();
        }
    });
}

/// A fake host for unit tests off wasm: it runs a handler per op and keeps
/// a reply that does not fit, as the real transport does.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod fake {
    use std::cell::RefCell;

    type Handler = Box<dyn FnMut(&str, &[u8]) -> (u32, Vec<u8>)>;

    thread_local! {
        static HOST: RefCell<Option<Handler>> = RefCell::new(None);
        static PENDING: RefCell<Option<(u32, Vec<u8>)>> = RefCell::new(None);
    }

    /// Installs the fake host; None removes it (ops then fail).
    #[cfg(test)]
    pub(crate) fn set(h: Option<Handler>) {
        HOST.with(|c| *c.borrow_mut() = h);
        PENDING.with(|c| *c.borrow_mut() = None);
    }

    pub(super) fn call(op: &str, req: &[u8], resp: &mut [u8]) -> (u32, u32) {
        let (status, reply) = if op.is_empty() {
            match PENDING.with(|c| c.borrow_mut().take()) {
                Some(p) => p,
                None => panic!("fetch with no pending reply"),
            }
        } else {
            HOST.with(|c| match c.borrow_mut().as_mut() {
                Some(h) => h(op, req),
                None => (1, br#"{"code":"unavailable","message":"moat ops are available only inside a moat host (wasm32)"}"#.to_vec()),
            })
        };
        if reply.len() > resp.len() {
            let n = reply.len() as u32;
            PENDING.with(|c| *c.borrow_mut() = Some((status, reply)));
            return (super::STATUS_TOO_SMALL, n);
        }
        resp[..reply.len()].copy_from_slice(&reply);
        (status, reply.len() as u32)
    }
}
