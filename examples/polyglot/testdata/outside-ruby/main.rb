# The Ruby SDK's fixture of the http, media and ai wrappers, with the same
# commands as every language's outside-* fixture, driven by
# examples/polyglot's TestSDKOutside. A handler's Moat::Error fails the
# action with its code.
require "moat"

# POST the URL in the input with a header and a binary body.
Moat.action("http") do |input|
  r = Moat.http.fetch(input.text, method: "POST", headers: { "X-Test" => "sdk" }, body: "\x00\xffhi".b, timeout: 5, max_bytes: 65_536)
  { "status" => r.status, "url" => r.url, "echo" => r.header("X-Echo", ""), "body" => r.body.unpack1("H*") }
end

def info(i) = { "id" => i.id, "type" => i.type, "size" => i.size, "width" => i.width, "height" => i.height }

# Keep the input (or fetch "fetch URL"), thumbnail it, describe the
# thumbnail, read the item back.
Moat.action("media") do |input|
  item = input.start_with?("fetch ") ? Moat.media.fetch(input.byteslice(6..).force_encoding(Encoding::UTF_8)) : Moat.media.put(input, type: "image/png")
  thumb = Moat.media.thumbnail(item.id, 16, 16, fit: "cover")
  described = Moat.media.info(thumb.id)
  got, body = Moat.media.get(item.id)
  { "item" => info(item), "thumb" => info(thumb), "info" => info(described),
    "got" => { "id" => got.id, "len" => body.bytesize, "head" => body.byteslice(0, 8).unpack1("H*") } }
end

# "complete MODEL PROMPT", "json MODEL PROMPT", "embed MODEL TEXT".
Moat.action("ai") do |input|
  cmd, model, text = input.text.split(" ", 3)
  raise Moat::Error.new("invalid_argument", "want CMD MODEL TEXT") if text.nil?

  case cmd
  when "complete"
    r = Moat.ai.complete(model, [%w[system Answer\ briefly.], ["user", text]], max_tokens: 64, temperature: 0.25)
    out = { "text" => r.text }
  when "json"
    schema = { "type" => "object", "properties" => { "answer" => { "type" => "string" } }, "required" => ["answer"] }
    r = Moat.ai.complete(model, text, json_schema: schema)
    out = { "text" => r.text }
  when "embed"
    r = Moat.ai.embed(model, [text, "moat"])
    out = { "vectors" => r.vectors }
  else
    raise Moat::Error.new("invalid_argument", "unknown ai command #{cmd}")
  end
  out.merge("input_tokens" => r.usage.input_tokens, "output_tokens" => r.usage.output_tokens, "model_call_id" => r.model_call_id)
end

# caller: who the call runs for (moat.caller), whatever the input says.
Moat.action("caller") do |_input|
  me = Moat.caller
  { "user" => me.user, "org" => me.org, "roles" => me.roles, "correlation_id" => me.correlation_id, "admin" => me.role?("admin") }
end
