# The Ruby SDK's conformance fixture, with the same commands as the C,
# Rust and AssemblyScript fixtures: kv, log, config, call, fail, echo and
# trap (examples/polyglot's TestSDK), and db, knowledge and task
# (TestSDKData, like the JavaScript fixture), each output a JSON object. A
# failed op's Moat::Error fails the action with its code.
require "moat"

# kv: "put KEY VALUE", "get KEY", "del KEY", "list PREFIX" (every page).
Moat.action("kv") do |input|
  cmd, key, value = input.split(" ", 3)
  case cmd
  when "put"
    Moat.kv.put(key, value || "")
    "ok"
  when "get" then Moat.kv.get(key) || "<not found>"
  when "del" then Moat.kv.delete(key) ? "deleted" : "<not found>"
  when "list"
    keys = []
    after = ""
    loop do
      page, more = Moat.kv.list(prefix: key.to_s, after: after)
      keys.concat(page)
      break unless more && !page.empty?

      after = page.last
    end
    keys.join("\n")
  else raise Moat::Error.new("invalid_argument", "unknown kv command #{cmd}")
  end
end

# log: "LEVEL message" logs with the field k=v.
Moat.action("log") do |input|
  level, message = input.text.split(" ", 2)
  if %w[debug info warn error].include?(level)
    Moat.log.public_send(level, message.to_s, k: "v")
  else # a level Moat.log has no method for: the host refuses it
    Moat.call("log.write", { "level" => level, "message" => message.to_s, "fields" => { "k" => "v" } })
  end
  "ok"
end

# config: the value of the key in the input, or not_found.
Moat.action("config") do |input|
  Moat.config(input.text) or raise Moat::Error.new("not_found", "no config key #{input.text}")
end

# call: "OP JSON" runs any op and returns its reply, as JSON.
Moat.action("call") do |input|
  op, req = input.text.split(" ", 2)
  JSON.generate(Moat.call(op, JSON.parse(req || "{}")))
end

# fail: "CODE message" fails with that code.
Moat.action("fail") do |input|
  code, message = input.text.split(" ", 2)
  raise Moat::Error.new(code, message.to_s)
end

# echo: the input, byte for byte.
Moat.action("echo") { |input| input }

# trap: the input goes to stderr, then the instance aborts.
Moat.action("trap") do |input|
  $stderr.puts(input.text)
  exit!(134)
end

# db: "insert MODEL N TAGS TITLE", "get MODEL ID", "query MODEL TAG",
# "update MODEL ID VERSION TITLE", "stale MODEL ID", "hostile MODEL",
# "delete MODEL ID VERSION".
Moat.action("db") do |input|
  a = input.text.split(" ", 5)
  case [a[0], a.size]
  in ["insert", 5]
    id, version = Moat.db.insert(a[1], { "title" => a[4], "n" => Integer(a[2]), "tags" => a[3].split(","), "done" => false, "body" => "b" })
    { "id" => id, "version" => version }
  in ["get", 3]
    d = Moat.db.get(a[1], a[2])
    next { "found" => false } if d.nil?

    { "found" => true, "id" => d.id, "version" => d.version, "owner" => d.owner, "created" => d.created, "updated" => d.updated,
      "title" => d.doc["title"], "doc" => d.doc }
  in ["query", 3]
    where = [["tags", "contains", a[2]], ["done", "=", false], ["n", "in", [1, 2, 3, 5, 8]]]
    titles = []
    pages = 0
    after = ""
    loop do
      page = Moat.db.query(a[1], where: where, order: ["-n"], limit: 2, after: after)
      pages += 1
      titles.concat(page.map { |d| d.doc["title"] })
      after = page.next
      break if after.empty?
    end
    { "titles" => titles, "pages" => pages, "count" => Moat.db.count(a[1], where: where) }
  in ["update", 5]
    { "version" => Moat.db.update(a[1], a[2], set: { "title" => a[4], "done" => true }, unset: ["body"], version: Integer(a[3])) }
  in ["stale", 3]
    # Read, write back with the version read, then write again with that
    # (now stale) version: the conflict reaches this code as e.code.
    d = Moat.db.get(a[1], a[2]) or raise Moat::Error.new("not_found", "no document #{a[2]}")
    v1 = Moat.db.update(a[1], a[2], set: { "n" => d.doc["n"] + 1 }, version: d.version)
    begin
      Moat.db.update(a[1], a[2], set: { "n" => d.doc["n"] + 1 }, version: d.version)
    rescue Moat::Error => e
      next { "code" => e.code, "version" => v1 } if e.code == "conflict"

      raise
    end
    raise Moat::Error.new("guest_error", "an update at stale version #{d.version} was accepted")
  in ["hostile", 2]
    # Documents the SDK must refuse before anything is sent: a number with
    # no JSON form, and a String (JSON text that would add members to the
    # request around it) where a Hash belongs.
    code = lambda do |&f|
      f.call
      "accepted"
    rescue Moat::Error => e
      e.code
    end
    { "nan" => code.call { Moat.db.insert(a[1], { "n" => Float::NAN }) },
      "smuggled" => code.call { Moat.db.insert(a[1], '{"title":"x"}, "model": "secrets"') } }
  in ["delete", 4]
    { "deleted" => Moat.db.delete(a[1], a[2], version: Integer(a[3])) }
  else
    raise Moat::Error.new("invalid_argument", "unknown db command #{input.text}")
  end
end

# knowledge: "add COLL ID LANG TEXT", "search COLL LANG QUERY" (LANG - for
# no filter), "delete COLL ID".
Moat.action("knowledge") do |input|
  text = input.text
  a = text.split(" ", text.start_with?("search ") ? 4 : 5)
  case [a[0], a.size]
  in ["add", 5]
    { "replaced" => Moat.knowledge.add(a[1], a[2], a[4], meta: { "lang" => a[3], "len" => a[4].bytesize }) }
  in ["search", 4]
    hits = Moat.knowledge.search(a[1], a[3], limit: 5, filter: a[2] == "-" ? nil : { "lang" => a[2] })
    { "hits" => hits.map { |h| { "id" => h.id, "lang" => h.meta["lang"] || "", "snippet" => h.snippet, "scored" => h.score.positive? } } }
  in ["delete", 3]
    { "deleted" => Moat.knowledge.delete(a[1], a[2]) }
  else
    raise Moat::Error.new("invalid_argument", "unknown knowledge command #{text}")
  end
end

# task: "enqueue ACTION KEY DELAY INPUT" (KEY, DELAY - for none; two
# attempts), "status ID", "cancel ID".
Moat.action("task") do |input|
  a = input.text.split(" ", 5)
  case [a[0], a.size]
  in ["enqueue", 4 | 5]
    id, existing = Moat.tasks.enqueue(a[1], a[4] || "", max_attempts: 2, key: a[2] == "-" ? "" : a[2], delay: a[3] == "-" ? nil : a[3])
    { "id" => id, "existing" => existing }
  in ["status", 2]
    st = Moat.tasks.status(a[1])
    { "state" => st.state, "attempts" => st.attempts, "max_attempts" => st.max_attempts, "result" => st.result.force_encoding(Encoding::UTF_8),
      "error" => st.error, "code" => st.code, "run_at" => st.run_at }
  in ["cancel", 2]
    cancelled, state = Moat.tasks.cancel(a[1])
    { "cancelled" => cancelled, "state" => state }
  else
    raise Moat::Error.new("invalid_argument", "unknown task command #{input.text}")
  end
end
