// Package storetest is the conformance suite of package store's backends:
// every backend (store/sqlite, store/postgres, any later one) must pass it
// unchanged, so the front's promises (scoping, validation, quotas,
// single-use confirmations, audit batches, module blobs, the change feed,
// rate buckets, shared compiled code, documents of the db family, the task queue and schedule ticks, model calls' daily budgets, knowledge vectors and hybrid search, media items and their bytes, the operator's sealed secrets) hold whichever database is behind a *store.Store.
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
		name string
		run  func(t *testing.T)
	}{
		{"KVRoundTrip", su.testKVRoundTrip},
		{"KVListPrefix", su.testKVListPrefix},
		{"KVListPagination", su.testKVListPagination},
		{"KVListLimitDefaultAndCap", su.testKVListLimitDefaultAndCap},
		{"ScopeIsolation", su.testScopeIsolation},
		{"Validation", su.testValidation},
		{"ConcurrentPuts", su.testConcurrentPuts},
		{"CanceledContext", su.testCanceledContext},
		{"KVQuota", su.testKVQuota},
		{"KVQuotaConcurrent", su.testKVQuotaConcurrent},
		{"KVGroupCommit", su.testKVGroupCommit},
		{"AuditRoundTrip", su.testAuditRoundTrip},
		{"AuditFilters", su.testAuditFilters},
		{"AuditLimitDefaultAndCap", su.testAuditLimitDefaultAndCap},
		{"AuditValidation", su.testAuditValidation},
		{"AuditAttrs", su.testAuditAttrs},
		{"AuditText", su.testAuditText},
		{"AuditBatch", su.testAuditBatch},
		{"AuditMatchesModel", su.testAuditMatchesModel},
		{"AuditPrune", su.testAuditPrune},
		{"ConfirmationUse", su.testConfirmationUse},
		{"ConfirmationExpired", su.testConfirmationExpired},
		{"ConfirmationUseRace", su.testConfirmationUseRace},
		{"ConfirmationsPending", su.testConfirmationsPending},
		{"ConfirmationCreateValidation", su.testConfirmationCreateValidation},
		{"ConfirmationCleanup", su.testConfirmationCleanup},
		{"ConfirmationBinding", su.testConfirmationBinding},
		{"APIKeys", su.testAPIKeys},
		{"ModuleVersions", su.testModuleVersions},
		{"ModuleQuota", su.testModuleQuota},
		{"ModuleBlobs", su.testModuleBlobs},
		{"WatchModules", su.testWatchModules},
		{"RateTake", su.testRateTake},
		{"RateTakeConcurrent", su.testRateTakeConcurrent},
		{"OrgScoping", su.testOrgScoping},
		{"CodeRoundTrip", su.testCodeRoundTrip},
		{"CodeValidation", su.testCodeValidation},
		{"CodeTooLarge", su.testCodeTooLarge},
		{"CodeEviction", su.testCodeEviction},
		{"KnowledgeContract", su.testKnowledgeContract},
		{"KnowledgeRanking", su.testKnowledgeRanking},
		{"KnowledgeSnippet", su.testKnowledgeSnippet},
		{"KnowledgeFilter", su.testKnowledgeFilter},
		{"KnowledgeScoping", su.testKnowledgeScoping},
		{"KnowledgeUserScope", su.testKnowledgeUserScope},
		{"KnowledgeQuota", su.testKnowledgeQuota},
		{"KnowledgeHostile", su.testKnowledgeHostile},
		{"KnowledgeValidation", su.testKnowledgeValidation},
		{"DBRoundTrip", su.testDBRoundTrip},
		{"DBValidation", su.testDBValidation},
		{"DBScoping", su.testDBScoping},
		{"DBQuery", su.testDBQuery},
		{"DBQueryHostile", su.testDBQueryHostile},
		{"DBPageBytes", su.testDBPageBytes},
		{"DBQuota", su.testDBQuota},
		{"DBQuotaConcurrent", su.testDBQuotaConcurrent},
		{"DBConflict", su.testDBConflict},
		{"DBMigrate", su.testDBMigrate},
		{"TaskContract", su.testTaskContract},
		{"TaskIdempotency", su.testTaskIdempotency},
		{"TaskScoping", su.testTaskScoping},
		{"TaskRetries", su.testTaskRetries},
		{"TaskLease", su.testTaskLease},
		{"TaskHostile", su.testTaskHostile},
		{"TaskQuota", su.testTaskQuota},
		{"TaskOrigin", su.testTaskOrigin},
		{"ScheduleFire", su.testScheduleFire},
		{"AIBudget", su.testAIBudget},
		{"AIBudgetRace", su.testAIBudgetRace},
		{"KnowledgeHybrid", su.testKnowledgeHybrid},
		{"KnowledgeVectorQuota", su.testKnowledgeVectorQuota},
		{"MediaContract", su.testMediaContract},
		{"MediaScoping", su.testMediaScoping},
		{"MediaValidation", su.testMediaValidation},
		{"MediaQuota", su.testMediaQuota},
		{"MediaQuotaConcurrent", su.testMediaQuotaConcurrent},
		{"SecretsContract", su.testSecretsContract},
		{"SecretsValidation", su.testSecretsValidation},
		{"SecretsQuota", su.testSecretsQuota},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
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
		name string
		run  func(t *testing.T, open func(t *testing.T, n int) []*store.Store)
	}{
		{"KVQuota", testSharedKVQuota},
		{"ConfirmationUse", testSharedConfirmationUse},
		{"WatchModules", testSharedWatchModules},
		{"RateTake", testSharedRateTake},
		{"ModuleQuota", testSharedModuleQuota},
		{"CodeBudget", testSharedCodeBudget},
		{"KnowledgeQuota", testSharedKnowledgeQuota},
		{"DB", testSharedDB},
		{"TaskClaim", testSharedTaskClaim},
		{"ScheduleFire", testSharedScheduleFire},
		{"TaskEnqueue", testSharedTaskEnqueue},
		{"AIBudget", testSharedAIBudget},
		{"MediaQuota", testSharedMediaQuota},
		{"AuditPrune", testSharedAuditPrune},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, open) })
	}
}
