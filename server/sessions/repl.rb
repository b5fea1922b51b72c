# A session's code context (package server/sessions) in Ruby: one
# resident CRuby instance whose top-level binding persists between runs,
# so local variables, methods and constants stay. Each run's $stdout and
# $stderr are kept apart and returned with the inspect of the code's
# value (nil: no result), as the Python REPL does.
require "moat"
require "json"
require "stringio"

$moat_count = 0
$moat_binding = TOPLEVEL_BINDING
$moat_env_set = false

Moat.action("run") do |input|
  $moat_count += 1
  req = JSON.parse(input.text)
  unless $moat_env_set
    # The session's variables: not in the image every context of the
    # organization starts from (rubyinterp.go), so given with the runs.
    ENV.update(req["env"] || {})
    $moat_env_set = true
  end
  out, err = StringIO.new, StringIO.new
  saved = [$stdout, $stderr]
  $stdout, $stderr = out, err
  result, error = nil, nil
  begin
    begin
      Dir.chdir("/home/user")
    rescue StandardError
      nil
    end
    v = eval(req["code"].to_s, $moat_binding, "<cell>", 1)
    result = v.inspect unless v.nil?
  rescue Exception => e # rubocop:disable Lint/RescueException - SystemExit too: the context lives on
    error = { "name" => e.class.name, "value" => e.message, "traceback" => e.full_message(highlight: false) }
  ensure
    $stdout, $stderr = saved
  end
  JSON.generate({ "stdout" => out.string, "stderr" => err.string, "result" => result,
                  "error" => error, "execution_count" => $moat_count })
end
