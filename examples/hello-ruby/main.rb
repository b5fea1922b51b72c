# hello-ruby is a minimal moat plugin in Ruby. Its one action, greet, takes
# a name (default "world"), logs it, counts its calls in the key-value store
# and returns the greeting. The script runs once per instance; the instance
# serves many calls (Moat.action registers the handler).
require "moat"

Moat.action("greet") do |input|
  name = input.text.strip
  name = "world" if name.empty?
  greeting = Moat.config("greeting", "Hello")
  Moat.log.info("greeting", name: name)
  count = (Moat.kv.get_str("count") || "0").to_i + 1
  Moat.kv.put("count", count.to_s)
  "#{greeting}, #{name}! (call ##{count})"
end
