use strict;
use warnings;

my $line = <STDIN>;
chomp $line;
print "$ENV{GREETING} $line from $ARGV[0]\n";
print STDERR "bye\n";
exit 3;
