// Package storetest is the conformance suite of package store's backends:
// every backend (store/sqlite, store/postgres, any later one) must pass it
// unchanged, so the front's promises (scoping, validation, quotas,
// single-use confirmations, audit batches, module blobs, the change feed,
// rate buckets, shared compiled code, documents of the db family, the task queue and schedule ticks, model calls' daily budgets, knowledge vectors and hybrid search, media items and their bytes, the operator's sealed secrets, paused sessions' images and the replica and session directories) hold whichever database is behind a *store.Store.
//
// A backend's test calls Run with a function that opens a fresh, empty
// store, and RunShared with one that opens several handles on one fresh
// database, standing for several processes or replicas:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) *store.Store { ... })
//		storetest.RunShared(t, func(t *testing.T, n int) []*store.Store { ... })
//	}
//
// The suite runs per family: the host's own storage (kv, audit,
// confirmations, keys, modules, code, rates) is every backend's, and each
// op family's tests (named after it: Knowledge*, DB*, Task*, AIBudget*,
// Media*, Secrets*) run when the backend implements that family's
// storage (store.Store.Families) and are skipped, saying so, when it does
// not. So `go test -run 'TestConformance/Media'` holds a backend to one
// family's contract, and a backend that implements only some families
// passes for what it implements.
//
// The tests are black-box: they use the public API of package store only.
package storetest

import (
	"testing"

	"github.com/moat-sandbox/moat/host/store"
)

// suite holds the opener the tests share.
type suite struct {
	open func(t *testing.T) *store.Store
}

// Run runs the conformance suite, each test as a subtest on a store of its
// own from open. open must return a fresh, empty store and arrange for it
// to be closed when t ends.
func Run(t *testing.T, open func(t *testing.T) *store.Store) {
	su := suite{open: open}
	tests := []struct {
		name, family string
		run          func(t *testing.T)
	}{
		{"KVRoundTrip", "", su.testKVRoundTrip},
		{"KVListPrefix", "", su.testKVListPrefix},
		{"KVListPagination", "", su.testKVListPagination},
		{"KVListLimitDefaultAndCap", "", su.testKVListLimitDefaultAndCap},
		{"ScopeIsolation", "", su.testScopeIsolation},
		{"Validation", "", su.testValidation},
		{"ConcurrentPuts", "", su.testConcurrentPuts},
		{"CanceledContext", "", su.testCanceledContext},
		{"KVQuota", "", su.testKVQuota},
		{"KVQuotaConcurrent", "", su.testKVQuotaConcurrent},
		{"KVGroupCommit", "", su.testKVGroupCommit},
		{"AuditRoundTrip", "", su.testAuditRoundTrip},
		{"AuditFilters", "", su.testAuditFilters},
		{"AuditLimitDefaultAndCap", "", su.testAuditLimitDefaultAndCap},
		{"AuditValidation", "", su.testAuditValidation},
		{"AuditAttrs", "", su.testAuditAttrs},
		{"AuditText", "", su.testAuditText},
		{"AuditBatch", "", su.testAuditBatch},
		{"AuditMatchesModel", "", su.testAuditMatchesModel},
		{"AuditPrune", "", su.testAuditPrune},
		{"ConfirmationUse", "", su.testConfirmationUse},
		{"ConfirmationExpired", "", su.testConfirmationExpired},
		{"ConfirmationUseRace", "", su.testConfirmationUseRace},
		{"ConfirmationsPending", "", su.testConfirmationsPending},
		{"ConfirmationCreateValidation", "", su.testConfirmationCreateValidation},
		{"ConfirmationCleanup", "", su.testConfirmationCleanup},
		{"ConfirmationBinding", "", su.testConfirmationBinding},
		{"ConfirmationDecide", "", su.testConfirmationDecide},
		{"ConfirmationDecideRace", "", su.testConfirmationDecideRace},
		{"ConfirmationRoles", "", su.testConfirmationRoles},
		{"APIKeys", "", su.testAPIKeys},
		{"ModuleVersions", "", su.testModuleVersions},
		{"ModuleQuota", "", su.testModuleQuota},
		{"ModuleBlobs", "", su.testModuleBlobs},
		{"WatchModules", "", su.testWatchModules},
		{"RateTake", "", su.testRateTake},
		{"RateTakeConcurrent", "", su.testRateTakeConcurrent},
		{"RateSweep", "", su.testRateSweep},
		{"OrgScoping", "", su.testOrgScoping},
		{"CodeRoundTrip", "", su.testCodeRoundTrip},
		{"CodeValidation", "", su.testCodeValidation},
		{"CodeTooLarge", "", su.testCodeTooLarge},
		{"CodeEviction", "", su.testCodeEviction},
		{"KnowledgeContract", "knowledge", su.testKnowledgeContract},
		{"KnowledgeRanking", "knowledge", su.testKnowledgeRanking},
		{"KnowledgeSnippet", "knowledge", su.testKnowledgeSnippet},
		{"KnowledgeFilter", "knowledge", su.testKnowledgeFilter},
		{"KnowledgeScoping", "knowledge", su.testKnowledgeScoping},
		{"KnowledgeUserScope", "knowledge", su.testKnowledgeUserScope},
		{"KnowledgeQuota", "knowledge", su.testKnowledgeQuota},
		{"KnowledgeHostile", "knowledge", su.testKnowledgeHostile},
		{"KnowledgeValidation", "knowledge", su.testKnowledgeValidation},
		{"DBRoundTrip", "db", su.testDBRoundTrip},
		{"DBValidation", "db", su.testDBValidation},
		{"DBScoping", "db", su.testDBScoping},
		{"DBQuery", "db", su.testDBQuery},
		{"DBQueryHostile", "db", su.testDBQueryHostile},
		{"DBPageBytes", "db", su.testDBPageBytes},
		{"DBQuota", "db", su.testDBQuota},
		{"DBQuotaConcurrent", "db", su.testDBQuotaConcurrent},
		{"DBConflict", "db", su.testDBConflict},
		{"DBMigrate", "db", su.testDBMigrate},
		{"TaskContract", "tasks", su.testTaskContract},
		{"TaskIdempotency", "tasks", su.testTaskIdempotency},
		{"TaskStats", "tasks", su.testTaskStats},
		{"TaskScoping", "tasks", su.testTaskScoping},
		{"TaskRetries", "tasks", su.testTaskRetries},
		{"TaskLease", "tasks", su.testTaskLease},
		{"TaskHostile", "tasks", su.testTaskHostile},
		{"TaskQuota", "tasks", su.testTaskQuota},
		{"TaskOrigin", "tasks", su.testTaskOrigin},
		{"ScheduleFire", "tasks", su.testScheduleFire},
		{"AIBudget", "ai", su.testAIBudget},
		{"AIBudgetRace", "ai", su.testAIBudgetRace},
		{"KnowledgeHybrid", "knowledge", su.testKnowledgeHybrid},
		{"KnowledgeVectorQuota", "knowledge", su.testKnowledgeVectorQuota},
		{"MediaContract", "media", su.testMediaContract},
		{"MediaScoping", "media", su.testMediaScoping},
		{"MediaValidation", "media", su.testMediaValidation},
		{"MediaQuota", "media", su.testMediaQuota},
		{"MediaQuotaConcurrent", "media", su.testMediaQuotaConcurrent},
		{"SecretsContract", "secrets", su.testSecretsContract},
		{"SecretsValidation", "secrets", su.testSecretsValidation},
		{"SecretsQuota", "secrets", su.testSecretsQuota},
		{"SessionImages", "", su.testSessionImages},
		{"SessionImageBound", "", su.testSessionImageBound},
		{"SessionImageLarge", "", su.testSessionImageLarge},
		{"SessionDirectory", "", su.testSessionDirectory},
	}
	supported := familiesOf(t, open(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skipUnsupported(t, supported, tt.family)
			tt.run(t)
		})
	}
}

// RunDB runs the db family's tests of Run alone, for a backend run again
// under another configuration (PostgreSQL with a database whose default
// collation is not C).
func RunDB(t *testing.T, open func(t *testing.T) *store.Store) {
	su := suite{open: open}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"DBRoundTrip", su.testDBRoundTrip},
		{"DBScoping", su.testDBScoping},
		{"DBQuery", su.testDBQuery},
		{"DBQueryHostile", su.testDBQueryHostile},
		{"DBMigrate", su.testDBMigrate},
	} {
		t.Run(tt.name, tt.run)
	}
}

// RunShared runs the tests of what must hold across processes: open
// returns n handles (n >= 2) on one fresh database, as n processes or
// replicas would have, each closed when t ends. Each test races the
// handles against each other.
func RunShared(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	tests := []struct {
		name, family string
		run          func(t *testing.T, open func(t *testing.T, n int) []*store.Store)
	}{
		{"KVQuota", "", testSharedKVQuota},
		{"ConfirmationUse", "", testSharedConfirmationUse},
		{"ConfirmationDecide", "", testSharedConfirmationDecide},
		{"WatchModules", "", testSharedWatchModules},
		{"RateTake", "", testSharedRateTake},
		{"ModuleQuota", "", testSharedModuleQuota},
		{"CodeBudget", "", testSharedCodeBudget},
		{"KnowledgeQuota", "knowledge", testSharedKnowledgeQuota},
		{"DB", "db", testSharedDB},
		{"TaskClaim", "tasks", testSharedTaskClaim},
		{"ScheduleFire", "tasks", testSharedScheduleFire},
		{"TaskEnqueue", "tasks", testSharedTaskEnqueue},
		{"AIBudget", "ai", testSharedAIBudget},
		{"MediaQuota", "media", testSharedMediaQuota},
		{"AuditPrune", "", testSharedAuditPrune},
		{"SessionImages", "", testSharedSessionImages},
	}
	supported := familiesOf(t, open(t, 2)[0])
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skipUnsupported(t, supported, tt.family)
			tt.run(t, open)
		})
	}
}

// familiesOf is which op families s's backend implements.
func familiesOf(t *testing.T, s *store.Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range s.Families() {
		out[f.Name] = f.Supported
	}
	return out
}

// skipUnsupported skips a family's test on a backend without its storage.
func skipUnsupported(t *testing.T, supported map[string]bool, family string) {
	t.Helper()
	if family != "" && !supported[family] {
		t.Skipf("the backend does not implement the %s family's storage", family)
	}
}
