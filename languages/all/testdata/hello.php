<?php
$line = trim(fgets(STDIN));
echo getenv("GREETING") . " " . $line . " from " . $argv[1] . "\n";
fwrite(STDERR, "bye\n");
exit(3);
