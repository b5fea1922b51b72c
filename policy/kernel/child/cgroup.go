package child

import (
	"fmt"
	"os"
	"strconv"
)

// JoinCgroup writes pid (0: the caller) into each cgroup.procs file.
func JoinCgroup(procsFiles []string, pid int) error {
	for _, f := range procsFiles {
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup: join: %w", err)
		}
	}
	return nil
}
