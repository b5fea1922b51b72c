# frozen_string_literal: true

# moat — the moat guest SDK for Ruby (CRuby 3.4 on ruby.wasm).
#
#   require "moat"
#
#   Moat.action("greet") do |input|          # input: a Moat::Input (a binary String)
#     me = Moat.caller                       # who the call runs for: #user, #org, #roles, #correlation_id
#     n = (Moat.kv.get_str("count") || "0").to_i + 1
#     Moat.kv.put("count", n.to_s)
#     Moat.log.info("counted", n: n)
#     "Hello, #{input.text.strip.then { |s| s.empty? ? "world" : s }}! (##{n})"
#   end
#
# A Ruby plugin is resident: moat runs main.rb once, when an instance
# starts, then serves call after call from that instance, each running the
# handler of its action (abi/resident.go: moat.next on the op device,
# $MOAT_OPS). So globals and constants a call changes stay for the next
# call on the same instance (the profile's isolation: fresh gives each call
# a new one). A plugin that registers no handler is refused at load: Ruby
# plugins have no run-once-per-call mode.
#
# Ops travel over the device-file transport: one JSON request line, one
# JSON reply line (host/transport/devfile.go). They work only while a
# handler runs: top-level code runs for no caller.
#
# A failed op raises Moat::Error, whose #code is the host's (denied,
# not_found, invalid_argument, conflict, too_large, unavailable...). A
# handler that raises Moat::Error fails its call with that code (an HTTP
# client sees invalid_argument as 400); any other exception, StandardError
# or not, fails it with guest_error and the instance serves on. While a
# handler runs, $stdout is $stderr (the host's log): the action's output is
# what the handler returns.

require "json"

module Moat
  ABI_VERSION = 1 # abi.Version
  OP_NEXT = "moat.next" # abi.OpNext
  RESIDENT_ENV = "MOAT_RESIDENT" # abi.ResidentEnv
  OPS_ENV = "MOAT_OPS" # transport.DeviceEnv
  MAX_REQUEST = 4 << 20 # abi.MaxRequestBytes: a request line's body
  JSON_SPECIAL = /["\\\x00-\x1f]/ # what a JSON string must escape

  # An op failed, or a handler fails its call: code is the host's error
  # code, reason what went wrong.
  class Error < StandardError
    attr_reader :code, :reason

    def initialize(code, reason = "")
      @code = code.to_s
      @reason = reason.to_s
      super(@reason.empty? ? @code : "#{@code}: #{@reason}")
    end
  end

  # The host said something the protocol does not allow: the instance ends.
  class ProtocolError < StandardError; end

  # A call's input: a binary String, with #text (UTF-8), #json, and the
  # #action and #correlation_id of the call.
  class Input < String
    attr_accessor :action, :correlation_id

    def text
      dup.force_encoding(Encoding::UTF_8)
    end

    def json
      empty? ? nil : JSON.parse(text)
    end
  end

  # The device-file transport: one request line, one reply line.
  class Device
    def initialize
      path = ENV[OPS_ENV]
      raise Error.new("unavailable", "the op table is not enabled for this run ($#{OPS_ENV} is unset)") if path.nil? || path.empty?

      begin
        @f = File.open(path, "r+b")
      rescue SystemCallError => e
        raise Error.new("unavailable", "cannot open #{path}: #{e.message}")
      end
      @f.sync = true
      @buf = String.new(capacity: 65_536)
    end

    def close = @f.close

    # forget lets the descriptor go without closing it (a copy's: the
    # number is the copy's own file, or none).
    def forget = (@f.autoclose = false)

    # call sends {"op":op,"req":req} (req already JSON) and returns the
    # decoded reply.
    def call(op, req)
      line = +"{\"op\":" << JSON.generate(op) << ",\"req\":" << req << "}\n"
      line.force_encoding(Encoding::BINARY)
      until line.empty?
        n = @f.syswrite(line)
        line = line.byteslice(n..)
      end
      # One buffer for the descriptor's life: a fresh 64 KiB String per
      # read costs more than the read.
      reply = @f.sysread(65_536, @buf)
      unless reply.end_with?("\n")
        reply = reply.dup
        reply << @f.sysread(65_536, @buf) until reply.end_with?("\n")
      end
      JSON.parse(reply.force_encoding(Encoding::UTF_8))
    rescue EOFError
      raise Error.new("internal", "no reply from the host for op #{op}")
    end
  end

  class << self
    # call runs one op by name and returns its decoded response (a Hash).
    # req is a Hash (nil: {}).
    def call(op, req = nil)
      raise Error.new("invalid_argument", "Moat.call: the op name must be a non-empty String, like \"kv.get\"") unless op.is_a?(String) && !op.empty?

      msg = device.call(op, encode(op, req.nil? ? {} : req))
      if (err = msg["error"])
        raise Error.new(err["code"] || "internal", err["message"] || "")
      end
      msg["resp"] || {}
    end

    # action registers the block as the handler of action name. The
    # handler gets the input (a Moat::Input) and returns a String (sent as
    # its bytes), nil (empty) or a JSON value (sent as JSON).
    def action(name, &handler)
      raise ArgumentError, "Moat.action: the action name must be a non-empty String" unless name.is_a?(String) && !name.empty?
      raise ArgumentError, "Moat.action(#{name.inspect}): give the handler as a block" unless handler
      raise ArgumentError, "Moat.action: action #{name.inspect} is registered twice" if actions.key?(name)

      actions[name] = handler
      name
    end

    # serve serves the registered actions until the host stops the
    # instance. moat calls it after main.rb's top-level code; a script may
    # call it itself, at its end.
    def serve
      return if @served

      @served = true
      raise ArgumentError, "Moat.serve: no actions registered; register them with Moat.action first" if actions.empty?
      unless ENV[RESIDENT_ENV] == "1"
        raise Error.new("unavailable", "Moat.serve: this run is not a plugin instance ($#{RESIDENT_ENV} is unset): load the plugin with moat run or moat serve")
      end

      serve_resident
    end

    # before_snapshot: the host is about to copy this instance's memory,
    # its top level done, for later instances to start from
    # (languages/ruby/plugin.go). The op device is closed: an instance
    # started from the copy opens its own (a descriptor is not in the
    # copy).
    def before_snapshot
      @device&.close
      @device = nil
    end

    # resume_copy serves in an instance started from a copy of a live one
    # (a session's fork or pause: languages/ruby/plugin.go), entered on
    # top of the copy's frames, which never run again. The op device the
    # copy holds is the original's: forgotten (its descriptor is not
    # closed: the number may be this instance's own) and a new one
    # opened; the random sequence is not the original's.
    def resume_copy
      @device&.forget
      @device = nil
      @served = true
      Random.srand
      serve_resident
    end

    # config is one value of the module's configuration, or default. The
    # configuration is fixed while the module is loaded, so a value is
    # asked of the host once per instance and kept.
    def config(key, default = nil)
      @config ||= {}
      unless @config.key?(key)
        r = call("config.get", { "key" => key })
        @config[key] = r["found"] ? (r["value"] || "") : :missing
      end
      v = @config[key]
      v == :missing ? default : v
    end

    # caller is who the call runs for (the op moat.caller), a
    # Moat::Principal. It needs no grant and is asked anew on every call (a
    # resident instance serves many callers). The principal is the host's,
    # never anything in the input: key per-user data by Moat.caller.user,
    # not by a user id the caller sends, which anyone can write. (It
    # shadows Kernel#caller only as Moat.caller.)
    def caller = Principal.from(call("moat.caller", {}))

    def kv = (@kv ||= KV.new)
    def log = (@log ||= Log.new)
    def db = (@db ||= DB.new)
    def knowledge = (@knowledge ||= Knowledge.new)
    def tasks = (@tasks ||= Tasks.new)
    def http = (@http ||= HTTP.new)
    def media = (@media ||= Media.new)
    def ai = (@ai ||= AI.new)

    # b64 and unb64 are base64 without the base64 library (a bundled gem
    # in Ruby 3.4, which --disable-gems leaves out).
    def b64(s) = [s].pack("m0")
    def unb64(s) = (s || "").unpack1("m0")

    # bytes_of is a value as bytes: a String as is, nil empty.
    def bytes_of(op, what, v)
      return "".b if v.nil?
      raise Error.new("invalid_argument", "op #{op}: #{what} is a String, not a #{v.class}") unless v.is_a?(String)

      v.b
    end

    # output_of is what a handler returned, as bytes.
    def output_of(v)
      case v
      when nil then "".b
      when String then v.b
      else JSON.generate(v).b
      end
    end

    private

    def device = (@device ||= Device.new)
    def actions = (@actions ||= {})

    def encode(op, v)
      JSON.generate(v)
    rescue JSON::GeneratorError, EncodingError, TypeError => e
      raise Error.new("invalid_argument", "op #{op}: encode the request: #{e.message}")
    end

    # run runs a handler: [output, nil] or [nil, {"code", "message"}].
    def run(name, data, correlation_id)
      handler = actions[name]
      unless handler
        return [nil, { "code" => "no_such_action", "message" => "no action #{name.inspect} is registered (Moat.action); registered: #{actions.keys.sort.inspect}" }]
      end

      input = Input.new(data)
      input.action = name
      input.correlation_id = correlation_id
      stdout = $stdout
      $stdout = $stderr # a handler's puts goes to the log; its output is what it returns
      begin
        [output_of(handler.call(input)), nil]
      rescue Error => e
        [nil, { "code" => e.code, "message" => e.reason }]
      rescue ProtocolError, SystemExit
        raise
      rescue Exception => e # rubocop:disable Lint/RescueException -- any failure of the handler is the call's
        $stderr.print(e.full_message(highlight: false))
        [nil, { "code" => "guest_error", "message" => "#{e.class}: #{e.message}" }]
      ensure
        $stdout = stdout
      end
    end

    # serve_resident serves calls until the host stops the instance: each
    # moat.next hands back the previous call's result and takes the next
    # call (abi/resident.go).
    def serve_resident
      req = JSON.generate({ "ready" => { "actions" => actions.keys } })
      loop do
        msg = device.call(OP_NEXT, req)
        if (err = msg["error"])
          raise ProtocolError, "#{OP_NEXT}: #{err["code"]}: #{err["message"]}"
        end

        nxt = msg["resp"] || {}
        return if nxt["stop"]

        data = nxt.key?("input") ? unb64(nxt["input"]) : (nxt["text"] || "").b
        out, err = run(nxt["action"].to_s, data, nxt["correlation_id"].to_s)
        req = result_line(out, err)
      end
    end

    # result_line is the moat.next request carrying a call's result. An
    # output the device cannot carry in one line, or that the instance has
    # no memory left to encode, fails the call, not the instance.
    def result_line(out, err)
      line = if err
               JSON.generate({ "error" => err })
             elsif !(text = out.dup.force_encoding(Encoding::UTF_8)).valid_encoding?
               "{\"output\":\"#{b64(out)}\"}"
             elsif !text.match?(JSON_SPECIAL)
               # Nothing to escape: the text is its own JSON string, at a
               # fifth of what JSON.generate costs in ruby.wasm.
               "{\"output_text\":\"#{text}\"}"
             else
               JSON.generate({ "output_text" => text }) # text costs no base64 either way
             end
      return line if line.bytesize <= MAX_REQUEST

      JSON.generate({ "error" => { "code" => "output_too_large", "message" => "the output is #{out.bytesize} bytes; a call's result is at most #{MAX_REQUEST} bytes on the op device" } })
    rescue NoMemoryError
      '{"error":{"code":"guest_error","message":"the output could not be encoded: out of memory (NoMemoryError)"}}'
    end
  end

  # The module's key-value store, scoped by the host to the caller's
  # organization and this module. Values are bytes (binary Strings).
  class KV
    # get is the value of key as a binary String, or nil.
    def get(key)
      r = Moat.call("kv.get", { "key" => key })
      r["found"] ? Moat.unb64(r["value"]) : nil
    end

    # get_str is the value of key as UTF-8 text, or nil.
    def get_str(key)
      get(key)&.force_encoding(Encoding::UTF_8)
    end

    def put(key, value)
      Moat.call("kv.put", { "key" => key, "value" => Moat.b64(Moat.bytes_of("kv.put", "the value", value)) })
      nil
    end

    # delete removes key: true if it existed.
    def delete(key) = Moat.call("kv.delete", { "key" => key })["deleted"] || false

    # list is [keys, more]: keys after `after` starting with prefix, in order.
    def list(prefix: "", after: "", limit: 0)
      r = Moat.call("kv.list", { "prefix" => prefix, "after" => after, "limit" => limit })
      [r["keys"] || [], r["more"] || false]
    end
  end

  # The host's structured log; records carry the module, the caller and
  # the correlation id. Keyword arguments become fields.
  class Log
    %w[debug info warn error].each do |level|
      define_method(level) do |message, **fields|
        Moat.call("log.write", { "level" => level, "message" => message.to_s, "fields" => fields.empty? ? nil : fields })
        nil
      end
    end
  end

  # Who a call runs for, as Moat.caller returns it: #user and #org (as the
  # host authenticated them), #roles (an Array, empty when none) and
  # #correlation_id (what the host's log records and audit events carry).
  Principal = Struct.new(:user, :org, :roles, :correlation_id) do
    def self.from(w)
      user, org, roles = w["user"], w["org"], w["roles"] || []
      unless user.is_a?(String) && !user.empty? && org.is_a?(String) && !org.empty?
        raise Error.new("internal", "op moat.caller: the reply names no user or organization")
      end
      raise Error.new("internal", "op moat.caller: the reply's roles are not a list of strings") unless roles.is_a?(Array) && roles.all?(String)

      new(user, org, roles, w["correlation_id"] || "")
    end

    # role? reports whether the principal holds role.
    def role?(role) = roles.include?(role)
  end

  # A stored document: its fields (#doc, a Hash) and what the host keeps
  # beside it.
  Doc = Struct.new(:id, :version, :owner, :created, :updated, :doc) do
    def self.from(w) = new(w["id"] || "", w["version"] || 0, w["owner"] || "", w["created"] || "", w["updated"] || "", w["doc"] || {})
  end

  # One page of a query: #docs and #next, the cursor of the next page (""
  # on the last).
  Page = Struct.new(:docs, :next) do
    include Enumerable

    def each(&) = docs.each(&)
  end

  # The module's documents in the models its moat.yaml declares, scoped by
  # the host to the caller's organization (and user, for scope: user).
  class DB
    # insert stores doc (a Hash) as a new document of model: [id, version].
    def insert(model, doc)
      raise Error.new("invalid_argument", "op db.insert: the document is a Hash, not a #{doc.class}") unless doc.is_a?(Hash)

      r = Moat.call("db.insert", { "model" => model, "doc" => doc })
      [r["id"] || "", r["version"] || 0]
    end

    # get is the document id of model (a Doc), or nil.
    def get(model, id)
      r = Moat.call("db.get", { "model" => model, "id" => id })
      r["found"] ? Doc.from(r) : nil
    end

    # query is one Page of the documents of model for which every
    # condition of where ([field, op, value] arrays) holds.
    def query(model, where: nil, order: nil, limit: 0, after: "")
      r = Moat.call("db.query", { "model" => model, "where" => conditions("db.query", where), "order" => Array(order), "limit" => limit, "after" => after })
      Page.new((r["docs"] || []).map { |d| Doc.from(d) }, r["next"] || "")
    end

    # update sets and unsets fields of document id; with version not 0 it
    # must still be at that version (else Moat::Error conflict). Returns the
    # new version.
    def update(model, id, set: nil, unset: nil, version: 0)
      req = { "model" => model, "id" => id, "version" => version }
      raise Error.new("invalid_argument", "op db.update: set is a Hash, not a #{set.class}") unless set.nil? || set.is_a?(Hash)

      req["set"] = set unless set.nil?
      req["unset"] = Array(unset) if unset && !unset.empty?
      Moat.call("db.update", req)["version"] || 0
    end

    def delete(model, id, version: 0) = Moat.call("db.delete", { "model" => model, "id" => id, "version" => version })["deleted"] || false
    def count(model, where: nil) = Moat.call("db.count", { "model" => model, "where" => conditions("db.count", where) })["count"] || 0

    private

    def conditions(op, where)
      return [] if where.nil?
      raise Error.new("invalid_argument", "op #{op}: where is an Array of [field, op, value] conditions, not a #{where.class}") unless where.is_a?(Array)

      where.each_with_index.map do |c, i|
        unless c.is_a?(Array) && c.size == 3 && c[0].is_a?(String) && c[1].is_a?(String)
          raise Error.new("invalid_argument", "op #{op}: condition #{i} is #{c.inspect}; write [field, op, value], like [\"done\", \"=\", false]")
        end

        c
      end
    end
  end

  # A document found: #id, #score, #snippet and #meta.
  Hit = Struct.new(:id, :score, :snippet, :meta)

  # The module's knowledge: ranked full-text search over named
  # collections, scoped to the caller's organization and this module.
  class Knowledge
    def add(collection, id, text, meta: nil)
      req = { "collection" => collection, "id" => id, "text" => text }
      req["meta"] = meta if meta && !meta.empty?
      Moat.call("knowledge.add", req)["replaced"] || false
    end

    def delete(collection, id) = Moat.call("knowledge.delete", { "collection" => collection, "id" => id })["deleted"] || false

    def search(collection, query, limit: 0, filter: nil)
      req = { "collection" => collection, "query" => query, "limit" => limit }
      req["filter"] = filter if filter && !filter.empty?
      (Moat.call("knowledge.search", req)["hits"] || []).map { |h| Hit.new(h["id"] || "", h["score"] || 0.0, h["snippet"] || "", h["meta"] || {}) }
    end
  end

  # A task's state; #result is the output of the run that succeeded.
  TaskStatus = Struct.new(:state, :attempts, :max_attempts, :result, :error, :code, :run_at)

  # Background runs of this module's own actions (capabilities: tasks:
  # true), as the caller whose call enqueued them.
  class Tasks
    # enqueue queues a run of action with input (String, nil or a JSON
    # value), now, after delay ("90s", or seconds) or at (RFC 3339).
    # Returns [id, existing].
    def enqueue(action, input = nil, delay: nil, at: nil, max_attempts: 0, key: "")
      req = { "action" => action, "max_attempts" => max_attempts, "key" => key }
      data = Moat.output_of(input)
      req["input"] = Moat.b64(data) unless data.empty?
      req["delay"] = delay.is_a?(Numeric) ? "#{delay}s" : delay unless delay.nil?
      req["at"] = at unless at.nil?
      r = Moat.call("task.enqueue", req)
      [r["id"] || "", r["existing"] || false]
    end

    def status(id)
      w = Moat.call("task.status", { "id" => id })
      TaskStatus.new(w["state"] || "", w["attempts"] || 0, w["max_attempts"] || 0, Moat.unb64(w["result"]), w["error"] || "", w["code"] || "", w["run_at"] || "")
    end

    # cancel is [cancelled, state].
    def cancel(id)
      r = Moat.call("task.cancel", { "id" => id })
      [r["cancelled"] || false, r["state"] || ""]
    end
  end

  # The final response of http.fetch: a 4xx or 5xx is a response, not an
  # error. Header names are lower case.
  HTTPResponse = Struct.new(:status, :headers, :body, :url) do
    def header(name, default = nil) = headers.fetch(name.downcase, default)
    def text = body.dup.force_encoding(Encoding::UTF_8)
    def json = JSON.parse(text)
  end

  # HTTP requests the host sends for the plugin, under the module's http
  # grants (abi/http.go).
  class HTTP
    def fetch(url, method: nil, headers: nil, body: nil, timeout: nil, max_bytes: 0)
      req = { "url" => url }
      req["method"] = method if method
      if headers
        unless headers.is_a?(Hash) && headers.all? { |k, v| k.is_a?(String) && v.is_a?(String) }
          raise Error.new("invalid_argument", "op http.fetch: headers is a Hash of String names to String values")
        end

        req["headers"] = headers
      end
      data = Moat.bytes_of("http.fetch", "the body", body)
      req["body"] = Moat.b64(data) unless data.empty?
      unless timeout.nil?
        raise Error.new("invalid_argument", "op http.fetch: timeout is seconds (0 to 60), not #{timeout.inspect}") unless timeout.is_a?(Numeric) && timeout >= 0 && timeout.finite?

        ms = (timeout * 1000).ceil
        req["timeout_ms"] = ms if ms.positive?
      end
      req["max_bytes"] = max_bytes if max_bytes.positive?
      w = Moat.call("http.fetch", req)
      HTTPResponse.new(w["status"] || 0, w["headers"] || {}, Moat.unb64(w["body"]), w["url"] || "")
    end

    def get(url, **kw) = fetch(url, **kw)

    # request reads the input of an action bound to an HTTP route
    # (moat.yaml routes:; abi/route.go) as a RouteRequest; an input that
    # is not one (the action was invoked directly) is invalid_argument.
    def request(input)
      r = begin
        JSON.parse(input.to_s)
      rescue JSON::ParserError
        nil
      end
      raise Error.new("invalid_argument", "the input is not an HTTP request of a route (moat.yaml routes:)") unless r.is_a?(Hash) && r["moat"] == "http.request"

      body = r["body_base64"] ? Moat.unb64(r["body_base64"]) : (r["body"] || "").b
      RouteRequest.new(r["route"] || "", r["auth"] || "", r["method"] || "", r["path"] || "", r["params"] || {},
                       r["query"] || {}, r["headers"] || {}, r["remote"] || "", body)
    end

    # response is the output that answers an action's route: status
    # (default 200), content_type (default text/plain), headers (only
    # those abi/route.go allows; never Set-Cookie), and one of body (a
    # String; binary ones travel as base64), json (any value, sent as
    # application/json) or media (a media item's id).
    def response(status: nil, content_type: nil, headers: nil, body: nil, json: nil, media: nil)
      r = { "moat" => "http.response" }
      r["status"] = status if status
      r["headers"] = headers if headers
      if !json.nil?
        r["content_type"] = content_type || "application/json"
        r["body"] = JSON.generate(json)
      elsif body
        s = body.to_s
        if s.dup.force_encoding(Encoding::UTF_8).valid_encoding?
          r["body"] = s.dup.force_encoding(Encoding::UTF_8)
        else
          r["body_base64"] = Moat.b64(s)
        end
      end
      r["content_type"] = content_type if content_type && !r.key?("content_type")
      r["media"] = media.to_s if media
      JSON.generate(r)
    end
  end

  # The request of a route (HTTP#request): header names are lower case,
  # query holds each name's values in an Array, body is bytes.
  RouteRequest = Struct.new(:route, :auth, :method, :path, :params, :query, :headers, :remote, :body) do
    def header(name, default = nil) = headers.fetch(name.downcase, default)
    def param(name, default = nil) = params.fetch(name, default)
    def query_value(name, default = nil) = (query[name] || [default]).first
    def text = body.dup.force_encoding(Encoding::UTF_8)
    def json = JSON.parse(text)
  end

  # A stored media item.
  MediaInfo = Struct.new(:id, :type, :size, :width, :height) do
    def self.from(w) = new(w["id"] || "", w["type"] || "", w["size"] || 0, w["width"] || 0, w["height"] || 0)
  end

  # The organization's media, kept by the host (abi/media.go).
  class Media
    def fetch(url) = MediaInfo.from(Moat.call("media.fetch", { "url" => url }))

    def put(data, type: nil)
      req = { "data" => Moat.b64(Moat.bytes_of("media.put", "data", data)) }
      req["type"] = type if type
      MediaInfo.from(Moat.call("media.put", req))
    end

    # get is [MediaInfo, bytes].
    def get(id)
      r = Moat.call("media.get", { "id" => id })
      [MediaInfo.from(r), Moat.unb64(r["data"])]
    end

    def info(id) = MediaInfo.from(Moat.call("media.info", { "id" => id }))

    def thumbnail(id, width, height, fit: nil)
      req = { "id" => id, "width" => width, "height" => height }
      req["fit"] = fit if fit
      MediaInfo.from(Moat.call("media.thumbnail", req))
    end
  end

  Usage = Struct.new(:input_tokens, :output_tokens)
  Completion = Struct.new(:text, :usage, :model_call_id) do
    def json = JSON.parse(text)
  end
  Embedding = Struct.new(:vectors, :usage, :model_call_id)

  # Model calls through the operator's providers, each model granted by
  # name (abi/ai.go).
  class AI
    # complete asks model to continue messages: an Array of {"role",
    # "content"} Hashes or [role, content] pairs, or a String (one user
    # message).
    def complete(model, messages, max_tokens: 0, temperature: nil, json_schema: nil)
      req = { "model" => model, "messages" => messages_of(messages) }
      req["max_tokens"] = max_tokens if max_tokens.positive?
      req["temperature"] = temperature unless temperature.nil?
      req["json_schema"] = json_schema unless json_schema.nil?
      w = Moat.call("ai.complete", req)
      Completion.new(w["text"] || "", usage(w["usage"]), w["model_call_id"] || "")
    end

    # embed asks model for one vector per input (an Array of String, or a
    # String).
    def embed(model, input)
      inputs = input.is_a?(String) ? [input] : Array(input)
      raise Error.new("invalid_argument", "op ai.embed: input is an Array of String, or a String") unless inputs.all?(String)

      w = Moat.call("ai.embed", { "model" => model, "input" => inputs })
      vectors = w["vectors"] || []
      raise Error.new("internal", "op ai.embed: #{inputs.size} inputs but the host returned #{vectors.size} vectors") if vectors.size != inputs.size

      Embedding.new(vectors, usage(w["usage"]), w["model_call_id"] || "")
    end

    private

    def usage(w) = Usage.new((w || {})["input_tokens"] || 0, (w || {})["output_tokens"] || 0)

    def messages_of(messages)
      return [{ "role" => "user", "content" => messages }] if messages.is_a?(String)

      Array(messages).each_with_index.map do |m, i|
        role, content = m.is_a?(Hash) ? [m["role"] || m[:role], m["content"] || m[:content]] : (m.is_a?(Array) && m.size == 2 ? m : [nil, nil])
        unless role.is_a?(String) && content.is_a?(String)
          raise Error.new("invalid_argument", "op ai.complete: message #{i} is #{m.inspect}; write {\"role\" => \"user\", \"content\" => \"...\"} or [\"user\", \"...\"]")
        end

        { "role" => role, "content" => content }
      end
    end
  end
end
