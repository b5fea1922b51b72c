# A session's code context (package server/sessions) in Ruby: one
# resident CRuby instance whose top-level binding persists between runs,
# so local variables, methods and constants stay. Each run's $stdout and
# $stderr are kept apart and returned with the inspect of the code's
# value (nil: no result), as the Python REPL does; or, when the caller
# streams the run ("stream": true), written to the real stdout and stderr
# as the code writes them (MoatStreamed) and not returned.
require "moat"
require "json"
require "stringio"

# A run's $stdout or $stderr when its caller streams it: each write goes
# to the real descriptor (the host hands it on as it is written) and is
# not kept; past the run's output limit the write fails, and this write
# and every later one of the run raise.
class MoatStreamed < StringIO
  def initialize(real)
    super()
    @real = real
    @cut = false
  end

  def write(*args)
    raise IOError, "moat: this run's output passed its limit; nothing more is printed" if @cut

    s = args.join
    begin
      @real.write(s)
      @real.flush
    rescue SystemCallError, IOError
      @cut = true
      raise IOError, "moat: this run's output passed its limit; nothing more is printed"
    end
    s.bytesize
  end
end

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
  out, err = req["stream"] ? [MoatStreamed.new(STDOUT), MoatStreamed.new(STDERR)] : [StringIO.new, StringIO.new]
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

# Be captured for a fork or a pause (fork.go): between runs, with no file
# the code opened still open (its descriptor is this instance's, and a
# copy's instance has none). The token goes on stdout, then a clock read,
# where the host copies this instance and lets the call go on; a copy is
# entered by Moat.resume_copy, on top of these frames, which never run
# again there.
Moat.action("park") do |input|
  tok = input.text
  ops = ENV["MOAT_OPS"]
  ObjectSpace.each_object(File) do |f|
    next if f.closed? || f.fileno <= 2 || f.path == ops

    raise IOError, "the file #{f.path.inspect} is open (descriptor #{f.fileno}); " \
                   "a copy of this context could not use it: close it, then fork or pause"
  end
  STDOUT.syswrite("#{tok}\n")
  Time.now
  "parked"
end
