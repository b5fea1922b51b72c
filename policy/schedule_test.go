package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

const scheduleBase = "name: a\nversion: 1.0.0\ncapabilities: {tasks: true}\nactions:\n  - name: digest\n  - name: wipe\n    confirm: true\n  - name: admin-only\n    roles: [admin]\n  - name: ops\n    roles: [admin, service]\n"

func TestParseManifestSchedules(t *testing.T) {
	m, err := policy.ParseManifest("moat.yaml", []byte(scheduleBase+`schedules:
  - {action: digest, cron: "0 7 * * *"}
  - {action: ops, cron: "  */15   *  * * mon-fri ", input: '{"full":true}', max_attempts: 5}
  - {action: digest, cron: "@hourly"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Schedules) != 3 {
		t.Fatalf("schedules = %+v", m.Schedules)
	}
	s := &m.Schedules[1]
	if s.Name() != "ops */15 * * * mon-fri" || s.Input != `{"full":true}` || s.MaxAttempts != 5 {
		t.Errorf("schedule 1 = %+v, name %q", s, s.Name())
	}
	from := time.Date(2026, 3, 2, 7, 1, 0, 0, time.UTC) // a Monday
	if got := m.Schedules[0].CronExpr().Next(from); !got.Equal(time.Date(2026, 3, 3, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("digest's next tick = %s", got)
	}
	if p := policy.ServicePrincipal("acme"); p.Validate() != nil || !p.HasRole(policy.ServiceRole) || p.Org != "acme" {
		t.Errorf("ServicePrincipal = %+v", p)
	}
}

func TestParseManifestScheduleErrors(t *testing.T) {
	tests := []struct {
		name, yaml, field, msg string
	}{
		{"bad cron", `schedules: [{action: digest, cron: "0 25 * * *"}]`, "schedules[0].cron", "hour field"},
		{"never fires", `schedules: [{action: digest, cron: "0 0 30 2 *"}]`, "schedules[0].cron", "never fires"},
		{"six fields", `schedules: [{action: digest, cron: "0 0 7 * * *"}]`, "schedules[0].cron", "6 fields"},
		{"no cron", `schedules: [{action: digest}]`, "schedules[0].cron", "needs a cron expression"},
		{"no action", `schedules: [{cron: "@daily"}]`, "schedules[0].action", "names the action"},
		{"unknown action", `schedules: [{action: digets, cron: "@daily"}]`, "schedules[0].action", "did you mean digest?"},
		{"confirm action", `schedules: [{action: wipe, cron: "@daily"}]`, "schedules[0].action", "needs confirmation"},
		{"roles without service", `schedules: [{action: admin-only, cron: "@daily"}]`, "schedules[0].action", "role service"},
		{"duplicate", "schedules:\n  - {action: digest, cron: \"0 7 * * *\"}\n  - {action: digest, cron: \"0  7 * * *\"}", "schedules[1]", "as schedules[0] does"},
		{"zero attempts", `schedules: [{action: digest, cron: "@daily", max_attempts: 0}]`, "schedules[0].max_attempts", "give 1 to 25"},
		{"absurd attempts", `schedules: [{action: digest, cron: "@daily", max_attempts: 1000000000}]`, "schedules[0].max_attempts", "give 1 to 25"},
		{"huge input", `schedules: [{action: digest, cron: "@daily", input: "` + strings.Repeat("x", 70<<10) + `"}]`, "schedules[0].input", "the most is 65536"},
		{"unknown field", `schedules: [{action: digest, crontab: "@daily"}]`, "schedules[0].crontab", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseManifest("moat.yaml", []byte(scheduleBase+tt.yaml+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.field+": ") || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v; want an error at %s saying %q", err, tt.field, tt.msg)
			}
		})
	}
	noTasks := strings.Replace(scheduleBase, "capabilities: {tasks: true}\n", "", 1) + `schedules: [{action: digest, cron: "@daily"}]`
	if _, err := policy.ParseManifest("moat.yaml", []byte(noTasks)); err == nil || !strings.Contains(err.Error(), "tasks: true") {
		t.Errorf("schedules without the tasks capability: %v", err)
	}
	many := scheduleBase + "schedules:\n"
	for i := range policy.MaxSchedules + 1 {
		many += "  - {action: digest, cron: \"" + string(rune('0'+i%10)) + " " + string(rune('0'+i/10)) + " * * *\"}\n"
	}
	if _, err := policy.ParseManifest("moat.yaml", []byte(many)); err == nil || !strings.Contains(err.Error(), "the most is 32") {
		t.Errorf("33 schedules: %v", err)
	}
}
