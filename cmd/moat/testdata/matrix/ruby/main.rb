# The acceptance matrix's Ruby plugin (see ../README.md).
require "moat"

def attempt(lines, family)
  lines << "#{family} ok #{yield}".rstrip
rescue Moat::Error => e
  lines << "#{family} err #{e.message}"
rescue SystemCallError => e
  lines << "#{family} err io: #{e.message}"
end

Moat.action("all") do |input|
  value = input.text
  lines = []
  attempt(lines, "log") { Moat.log.info("matrix", input: value) }
  attempt(lines, "config") { Moat.config("greeting", "-") }
  attempt(lines, "kv") do
    old = Moat.kv.get_str("matrix")
    Moat.kv.put("matrix", value)
    old || "-"
  end
  attempt(lines, "db") do
    n = Moat.db.count("notes")
    Moat.db.insert("notes", { "title" => value })
    n
  end
  attempt(lines, "knowledge") do
    hits = Moat.knowledge.search("docs", "matrix")
    Moat.knowledge.add("docs", value, "matrix #{value}")
    hits.length
  end
  attempt(lines, "tasks") do
    id, = Moat.tasks.enqueue("noop", value, delay: "1h")
    Moat.tasks.status(id).state
  end
  attempt(lines, "http") do
    r = Moat.http.fetch(Moat.config("url"), timeout: 5)
    "#{r.status} #{r.text}"
  end
  attempt(lines, "media") do
    item = Moat.media.put(Moat.config("pdf"), type: "application/pdf")
    info = Moat.media.info(item.id)
    "#{info.type} #{info.size}"
  end
  attempt(lines, "ai") { Moat.ai.complete("small-chat", "say matrix").text }
  attempt(lines, "files") { File.read(Moat.config("file")).strip }
  lines.join("\n") + "\n"
end

Moat.action("noop") { |input| input }
