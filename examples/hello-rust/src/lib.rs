//! hello-rust is a minimal moat plugin in Rust, using the guest SDK in
//! guests/rust. Its one action, greet, greets the input (or "world"),
//! counts its calls in the key-value store and logs who it greeted: the
//! same plugin as examples/hello-go. See README.md to build and run it.

fn greet(input: &[u8]) -> moat::Result<String> {
    let greeting = moat::config::get("greeting")?.unwrap_or_else(|| "Hello".to_string());
    let name = match std::str::from_utf8(input)? {
        "" => "world",
        name => name,
    };
    moat::info!("greeting", name = name);

    let count = match moat::kv::get("count")? {
        None => 0,
        Some(v) => String::from_utf8_lossy(&v)
            .parse::<u64>()
            .map_err(|_| moat::Error::guest(format!("kv key count holds {:?}, not a number", String::from_utf8_lossy(&v))))?,
    } + 1;
    moat::kv::put("count", count.to_string().as_bytes())?;
    Ok(format!("{}, {}! (call #{})", greeting, name, count))
}

moat::actions! {
    "greet" => greet,
}
