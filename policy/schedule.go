package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/abi"
)

// Schedule runs one of the module's actions on a cron schedule: at each
// tick (in UTC), once across every replica, a background task of the
// action is enqueued as the organization's service principal
// (ServicePrincipal), with Input. A module that declares schedules asks
// for the tasks capability, and its schedules fire only where the
// operator's profile grants it.
//
//	schedules:
//	  - {action: digest, cron: "0 7 * * *"}
type Schedule struct {
	Action      string `yaml:"action"`
	Cron        string `yaml:"cron"`
	Input       string `yaml:"input,omitempty"`
	MaxAttempts int    `yaml:"max_attempts,omitempty"`

	parsed *Cron
}

// MaxSchedules bounds the schedules of one manifest.
const MaxSchedules = 32

// The service principal's user and role.
const (
	ServiceUser = "moat.service"
	ServiceRole = "service"
)

// ServicePrincipal is who a schedule's tasks run as in org: the user
// moat.service holding the role service. An action a schedule runs must
// admit it: no roles, or service among them; and the profile's
// role_permissions decide what the role may do.
func ServicePrincipal(org string) Principal {
	return Principal{User: ServiceUser, Org: org, Roles: []string{ServiceRole}}
}

// CronExpr is the schedule's parsed expression (ParseManifest parses it;
// on a Schedule built by hand it is parsed here, nil when it is invalid).
func (s *Schedule) CronExpr() *Cron {
	if s.parsed == nil {
		s.parsed, _ = ParseCron(s.Cron)
	}
	return s.parsed
}

// Name identifies the schedule in its module: its action and expression.
// Its ticks are recorded under it, so reordering a manifest's schedules
// fires nothing twice.
func (s *Schedule) Name() string {
	expr := s.Cron
	if c := s.CronExpr(); c != nil {
		expr = c.String()
	}
	return s.Action + " " + expr
}

// checkSchedules validates the manifest's schedules.
func checkSchedules(ix *index, m *Manifest) error {
	if len(m.Schedules) == 0 {
		return nil
	}
	if len(m.Schedules) > MaxSchedules {
		return ix.Errorf("schedules", "has %d schedules; the most is %d", len(m.Schedules), MaxSchedules)
	}
	if !m.Capabilities.Tasks {
		return ix.Errorf("schedules", "schedules run as background tasks; ask for them with capabilities: {tasks: true}")
	}
	seen := map[string]int{}
	for i := range m.Schedules {
		s := &m.Schedules[i]
		p := fmt.Sprintf("schedules[%d]", i)
		a, ok := m.Action(s.Action)
		switch {
		case s.Action == "":
			return ix.Errorf(p+".action", "a schedule names the action it runs; add action: digest")
		case !ok:
			names := make([]string, len(m.Actions))
			for j, a := range m.Actions {
				names[j] = a.Name
			}
			return ix.Errorf(p+".action", "%q is not an action of this manifest%s; declare it under actions: (declared: %s)",
				s.Action, didYouMean(s.Action, names), strings.Join(names, ", "))
		case a.Confirm:
			return ix.Errorf(p+".action", "action %q needs confirmation (confirm: true), which a schedule cannot give; schedule another action", s.Action)
		case len(a.Roles) > 0 && !slices.Contains(a.Roles, ServiceRole):
			return ix.Errorf(p+".action", "action %q admits only the roles %s; a schedule runs as %s with the role %s: add it to the action's roles",
				s.Action, strings.Join(a.Roles, ", "), ServiceUser, ServiceRole)
		case s.Cron == "":
			return ix.Errorf(p+".cron", `a schedule needs a cron expression, like cron: "0 7 * * *" (every day at 07:00 UTC)`)
		case len(s.Input) > abi.MaxTaskInputLen:
			return ix.Errorf(p+".input", "is %d bytes; the most is %d", len(s.Input), abi.MaxTaskInputLen)
		case s.MaxAttempts < 0 || s.MaxAttempts > abi.MaxTaskAttempts || ix.Has(p+".max_attempts") && s.MaxAttempts == 0:
			return ix.Errorf(p+".max_attempts", "%d: give 1 to %d, or leave it out for %d", s.MaxAttempts, abi.MaxTaskAttempts, abi.DefaultTaskAttempts)
		}
		c, err := ParseCron(s.Cron)
		if err != nil {
			return ix.Errorf(p+".cron", "%v", err)
		}
		s.parsed = c
		if j, dup := seen[s.Name()]; dup {
			return ix.Errorf(p, "runs %s on %q as schedules[%d] does; remove one", s.Action, c.String(), j)
		}
		seen[s.Name()] = i
	}
	return nil
}
