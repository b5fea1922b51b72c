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

moat::actions! {
    "kv" => kv,
    "log" => log,
    "config" => config,
    "call" => call,
    "fail" => fail,
    "echo" => echo,
    "trap" => trap,
}
