line = $stdin.gets.to_s.strip
puts "#{ENV.fetch('GREETING', '?')} #{line} from #{ARGV[0]}"
$stderr.puts "bye"
exit 3
