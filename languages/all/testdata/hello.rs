use std::io::BufRead;

fn main() {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let args: Vec<String> = std::env::args().collect();
    let g = std::env::var("GREETING").unwrap_or_default();
    println!("{} {} from {}", g, line.trim_end(), args.get(1).map(|s| s.as_str()).unwrap_or("?"));
    eprintln!("bye");
    std::process::exit(3);
}
