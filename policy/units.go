package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in YAML the way Go writes it: "5s",
// "500ms", "1m30s". A bare number is refused rather than read as
// nanoseconds, because "timeout: 30" almost always means thirty seconds.
type Duration time.Duration

// ParseDuration parses a positive Go duration such as "5s" or "1m30s".
// Its errors say how to write one, so they can be shown as they are.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return 0, fmt.Errorf("%q has no unit; write it like %ss or %sms", s, s, s)
		}
		return 0, fmt.Errorf("%q is not a duration; write it like 5s or 500ms", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative; a duration must be positive, like 5s", s)
	}
	return Duration(d), nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration does, without zero trailing units:
// "5m" rather than "5m0s". The result parses back with ParseDuration.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return newNodeError(n, fmt.Sprintf("%q is not a duration; write it like 5s or 500ms", n.Value))
	}
	*d = v
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ByteSize is a number of bytes, written in YAML as an integer or with a
// unit: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of
// 1000). Both families are accepted because people copy sizes from tools
// that use either; units are case-sensitive because "mb" could be either.
type ByteSize uint64

var byteUnits = []struct {
	name string
	size uint64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3},
	{"B", 1},
}

const byteUnitList = "B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"

// ParseByteSize parses sizes like "65536", "64KiB", "64 MiB" or "1GB".
// Its errors say how to write one, so they can be shown as they are.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("%q is not a size; write it like 64MiB or 65536 (units %s)", s, byteUnitList)
	}
	if strings.HasPrefix(unit, ".") || strings.HasPrefix(unit, ",") {
		return 0, fmt.Errorf("%q is not a whole number; use a smaller unit, like 1536MiB instead of 1.5GiB", s)
	}
	mult := uint64(0)
	if unit == "" {
		mult = 1
	}
	for _, u := range byteUnits {
		if u.name == unit {
			mult = u.size
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("%q has unknown unit %q; use %s, like 64MiB", s, unit, byteUnitList)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return ByteSize(n * mult), nil
}

// String formats b with the unit that divides it exactly into the smallest
// number, with a space: "64 MiB", "1 GB", "1500 B".
func (b ByteSize) String() string {
	n, unit := uint64(b), "B"
	for _, u := range byteUnits {
		if b != 0 && u.name != "kB" && uint64(b)%u.size == 0 && uint64(b)/u.size < n {
			n, unit = uint64(b)/u.size, u.name
		}
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return newNodeError(n, fmt.Sprintf("%q is not a size; write it like 64MiB", n.Value))
	}
	*b = v
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (b ByteSize) MarshalYAML() (any, error) { return strings.ReplaceAll(b.String(), " ", ""), nil }
