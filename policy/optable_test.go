package policy_test

import "github.com/moat-sandbox/moat/policy"

// The op table is host/ops's: it declares each op to policy as it
// registers it. Policy's own tests stand in for it with the ops they name,
// the foundation's and the planned families', as their files will.
func init() {
	for op, capability := range map[string]string{
		"log.write": "", "config.get": "", "moat.caller": "",
		"kv.get": "kv", "kv.put": "kv", "kv.delete": "kv", "kv.list": "kv",
		"db.insert": "db", "db.get": "db", "db.query": "db", "db.update": "db", "db.delete": "db",
		"http.fetch":  "http",
		"media.fetch": "media", "media.put": "media",
		"ai.complete": "ai", "ai.embed": "ai",
		"knowledge.add": "knowledge", "knowledge.delete": "knowledge", "knowledge.search": "knowledge",
		"task.enqueue": "tasks",
	} {
		if err := policy.DeclareOp(op, capability); err != nil {
			panic(err)
		}
	}
}
