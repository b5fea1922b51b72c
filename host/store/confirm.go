package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// Confirmation is a pending request to run a confirm-required action once.
// Only a hash of its token is stored.
type Confirmation struct {
	TokenHash   string // hex sha256 of the token the caller holds
	Org, User   string // the principal it is bound to
	Module      string
	Action      string
	Input       []byte // the input the action will run with
	InputSHA256 string // hex sha256 of Input; ConfirmationCreate fills it in when empty
	// Binding is the hex SHA-256 that names the exact module the
	// confirmation was requested on (its code, manifest and sources: see
	// host's Module.Binding). ConfirmationUse refuses the confirmation
	// when the module it is used on has another: what was approved is
	// what runs, not whatever was uploaded under the name since.
	Binding              string
	Summary              string
	CreatedAt, ExpiresAt time.Time
	UsedAt               time.Time // zero until used
	// Roles are the requester's roles when it asked: an approved
	// confirmation runs as the requester with these, never with the
	// approver's roles, nor with roles the requester gained since.
	Roles []string
	// DecidedBy and Decision say who used the confirmation and how
	// (ConfirmationUse: the requester, DecisionConfirmed;
	// ConfirmationDecide: the approver, DecisionApproved or
	// DecisionDenied; DecisionStale when the module had changed). Both
	// are empty while unused, and on rows from before approvals.
	DecidedBy, Decision string
}

// The decisions a used confirmation records.
const (
	DecisionConfirmed = "confirmed" // by the requester's own token
	DecisionApproved  = "approved"  // by an approver of the organization
	DecisionDenied    = "denied"    // by an approver of the organization
	DecisionStale     = "stale"     // refused: the module changed since
)

// MaxConfirmationRoles bounds the roles stored with a confirmation.
const MaxConfirmationRoles = 64

// The errors of ConfirmationUse. They come wrapped; test with errors.Is.
var (
	ErrConfirmationNotFound  = errors.New("no such confirmation")
	ErrConfirmationUsed      = errors.New("confirmation already used")
	ErrConfirmationExpired   = errors.New("confirmation expired")
	ErrConfirmationPrincipal = errors.New("confirmation belongs to another principal")
	// ErrConfirmationStale: the module changed since the confirmation
	// was requested. The confirmation is used up, so that it can never
	// run the new code.
	ErrConfirmationStale = errors.New("the module changed since the confirmation was requested")
	// ErrConfirmationSelf: an approver decided its own request while
	// the profile does not allow it. The confirmation stays unused.
	ErrConfirmationSelf = errors.New("an approver may not decide its own confirmation")
)

// Confirmation list limits.
const (
	DefaultConfirmationLimit = 100
	MaxConfirmationLimit     = 1000
)

// confirmationRetention is how long an expired or used confirmation is kept
// before ConfirmationCreate may delete it.
const confirmationRetention = 24 * time.Hour

// confirmationSweep bounds how many old rows one ConfirmationCreate deletes.
const confirmationSweep = 100

func validHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ConfirmationCreate stores c. TokenHash must be 64 lowercase hex digits;
// Org, User, Module and Action must be set, and Binding be 64 lowercase hex digits; CreatedAt defaults to now and
// ExpiresAt must follow it; UsedAt must be zero. An empty InputSHA256 is
// computed from Input, and a given one must match it. Bad fields are
// *abi.Error with abi.CodeInvalidArgument naming the field.
//
// It also deletes a bounded number of confirmations that expired, or were
// used, more than 24 hours before c.CreatedAt.
func (s *Store) ConfirmationCreate(ctx context.Context, c Confirmation) (err error) {
	if c.CreatedAt.IsZero() {
		c.CreatedAt = time.Now()
	}
	sum := sha256.Sum256(c.Input)
	inputSum := hex.EncodeToString(sum[:])
	created, okCreated := nanos(c.CreatedAt)
	expires, okExpires := nanos(c.ExpiresAt)
	switch {
	case !validHexSHA256(c.TokenHash):
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation token hash is not 64 lowercase hex digits; pass the hex sha256 of the token")
	case c.Org == "":
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation org is empty; a confirmation is bound to a principal")
	case c.User == "":
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation user is empty; a confirmation is bound to a principal")
	case c.Module == "":
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation module is empty")
	case c.Action == "":
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation action is empty")
	case !validHexSHA256(c.Binding):
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation binding is not 64 lowercase hex digits; a confirmation is bound to the module it was requested on")
	case c.InputSHA256 != "" && c.InputSHA256 != inputSum:
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation input_sha256 %q does not match the input (sha256 %s)", c.InputSHA256, inputSum)
	case !okCreated:
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation created_at %s is out of range", c.CreatedAt)
	case c.ExpiresAt.IsZero() || !okExpires || expires <= created:
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation expires_at %s is not after created_at %s", c.ExpiresAt, c.CreatedAt)
	case !c.UsedAt.IsZero():
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation used_at is set; a new confirmation is unused")
	case c.DecidedBy != "" || c.Decision != "":
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation decided_by or decision is set; a new confirmation is undecided")
	case len(c.Roles) > MaxConfirmationRoles:
		return abi.Errorf(abi.CodeInvalidArgument, "confirmation roles: %d roles, at most %d", len(c.Roles), MaxConfirmationRoles)
	}
	roles := c.Roles
	if roles == nil {
		roles = []string{}
	}
	rolesJSON, err := json.Marshal(roles)
	if err != nil {
		return fmt.Errorf("store: confirmation.create: roles: %w", err)
	}
	input := c.Input
	if input == nil {
		input = []byte{} // a driver binds a nil slice as NULL
	}
	err = s.b.ConfirmationCreate(ctx, driver.ConfirmationRow{
		TokenHash: c.TokenHash, Org: c.Org, User: c.User, Module: c.Module, Action: c.Action,
		Input: input, InputSHA256: inputSum, Summary: c.Summary, Binding: c.Binding,
		CreatedAt: created, ExpiresAt: expires, Roles: string(rolesJSON),
	}, created-int64(confirmationRetention), confirmationSweep)
	switch {
	case errors.Is(err, driver.ErrConflict):
		return errors.New("store: confirmation.create: a confirmation with this token hash already exists; use a fresh random token")
	case err != nil:
		return fmt.Errorf("store: confirmation.create: %w", err)
	}
	return nil
}

func fromConfirmationRow(r *driver.ConfirmationRow) *Confirmation {
	c := &Confirmation{
		TokenHash: r.TokenHash, Org: r.Org, User: r.User, Module: r.Module, Action: r.Action,
		Input: r.Input, InputSHA256: r.InputSHA256, Binding: r.Binding, Summary: r.Summary,
		CreatedAt: fromNanos(r.CreatedAt), ExpiresAt: fromNanos(r.ExpiresAt),
		DecidedBy: r.DecidedBy, Decision: r.Decision, Roles: []string{},
	}
	// A row the store wrote holds a JSON array; anything else reads as
	// no roles, which grants the least.
	_ = json.Unmarshal([]byte(r.Roles), &c.Roles)
	if c.Roles == nil {
		c.Roles = []string{}
	}
	if c.Input == nil {
		c.Input = []byte{}
	}
	if r.UsedAt != 0 {
		c.UsedAt = fromNanos(r.UsedAt)
	}
	return c
}

// ConfirmationUse atomically claims the confirmation whose token hash is
// tokenHash for the principal org/user, on the module whose binding is
// binding, at time now, and returns it with UsedAt set. It succeeds at most
// once per token, even with concurrent callers (in this process or
// another, or another replica on the same database): the backend locks the
// row, these checks run, and the claim is an update of an unused row, all
// in one transaction.
//
// The errors wrap ErrConfirmationNotFound, ErrConfirmationPrincipal (the
// confirmation is bound to another org or user; it stays unused),
// ErrConfirmationUsed (a replay), ErrConfirmationExpired (now is at or
// after ExpiresAt) or ErrConfirmationStale (the module's binding is not the
// one the confirmation was requested on; the confirmation is used up, so
// that swapping the module back and forth cannot revive it), checked in
// that order.
func (s *Store) ConfirmationUse(ctx context.Context, tokenHash, org, user, binding string, now time.Time) (_ *Confirmation, err error) {
	usedAt, ok := nanos(now)
	if !ok {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "confirmation use: time %s is out of range", now)
	}
	row, err := s.b.ConfirmationClaim(ctx, tokenHash, usedAt, func(r *driver.ConfirmationRow) error {
		switch {
		case r.Org != org || r.User != user:
			return fmt.Errorf("requested by user %q in org %q: %w", user, org, ErrConfirmationPrincipal)
		case r.UsedAt != 0:
			return fmt.Errorf("used at %s: %w", fromNanos(r.UsedAt).Format(time.RFC3339Nano), ErrConfirmationUsed)
		case usedAt >= r.ExpiresAt:
			return fmt.Errorf("expired at %s: %w", fromNanos(r.ExpiresAt).Format(time.RFC3339Nano), ErrConfirmationExpired)
		}
		r.DecidedBy, r.Decision = user, DecisionConfirmed
		if r.Binding != binding {
			r.Decision = DecisionStale
		}
		return nil
	})
	return claimed(row, err, usedAt, binding, "confirmation.use")
}

// claimed turns the result of a claim into ConfirmationUse's and
// ConfirmationDecide's.
func claimed(row *driver.ConfirmationRow, err error, usedAt int64, binding, op string) (*Confirmation, error) {
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return nil, fmt.Errorf("store: %s: %w", op, ErrConfirmationNotFound)
	case errors.Is(err, driver.ErrConflict):
		return nil, fmt.Errorf("store: %s: %w", op, ErrConfirmationUsed)
	case err != nil:
		return nil, fmt.Errorf("store: %s: %w", op, err)
	}
	c := fromConfirmationRow(row)
	c.UsedAt = fromNanos(usedAt)
	if c.Decision == DecisionStale {
		return c, fmt.Errorf("store: %s: requested on module %s, used on %s: %w", op, short(c.Binding), short(binding), ErrConfirmationStale)
	}
	return c, nil
}

// ConfirmationDecision is an approver's decision on another principal's
// confirmation (see ConfirmationDecide).
type ConfirmationDecision struct {
	Org      string // the approver's organization
	Approver string // the approver's user
	Approve  bool   // approve (run the action) or deny
	// Binding is the module's binding now; an approval of a
	// confirmation requested on another is used up as stale.
	Binding string
	// AllowSelf lets the approver decide its own request (the
	// profile's confirm_self_approve).
	AllowSelf bool
	Now       time.Time
}

// ConfirmationDecide atomically uses the confirmation whose token hash is
// tokenHash on an approver's decision d, and returns it with UsedAt,
// DecidedBy and Decision set. Like ConfirmationUse it succeeds at most once
// per confirmation across replicas: the row is locked, checked and claimed
// in one transaction, so of two approvers (or an approver and the
// requester's own token) exactly one wins and the other gets
// ErrConfirmationUsed.
//
// The errors wrap ErrConfirmationNotFound (none, or one of another
// organization: an approver cannot tell the two apart), ErrConfirmationSelf
// (the approver requested it and AllowSelf is false; it stays unused),
// ErrConfirmationUsed, ErrConfirmationExpired, or, for an approval,
// ErrConfirmationStale (the binding differs; it is used up), checked in
// that order. A denial needs no binding.
func (s *Store) ConfirmationDecide(ctx context.Context, tokenHash string, d ConfirmationDecision) (*Confirmation, error) {
	usedAt, ok := nanos(d.Now)
	switch {
	case !ok:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "confirmation decide: time %s is out of range", d.Now)
	case d.Org == "" || d.Approver == "":
		return nil, abi.Errorf(abi.CodeInvalidArgument, "confirmation decide: the approver's org and user must be set")
	}
	row, err := s.b.ConfirmationClaim(ctx, tokenHash, usedAt, func(r *driver.ConfirmationRow) error {
		switch {
		case r.Org != d.Org:
			return driver.ErrNotFound
		case r.User == d.Approver && !d.AllowSelf:
			return fmt.Errorf("user %q requested it: %w", d.Approver, ErrConfirmationSelf)
		case r.UsedAt != 0:
			return fmt.Errorf("%s by %q at %s: %w", r.Decision, r.DecidedBy, fromNanos(r.UsedAt).Format(time.RFC3339Nano), ErrConfirmationUsed)
		case usedAt >= r.ExpiresAt:
			return fmt.Errorf("expired at %s: %w", fromNanos(r.ExpiresAt).Format(time.RFC3339Nano), ErrConfirmationExpired)
		}
		r.DecidedBy, r.Decision = d.Approver, DecisionDenied
		if d.Approve {
			r.Decision = DecisionApproved
			if r.Binding != d.Binding {
				r.Decision = DecisionStale
			}
		}
		return nil
	})
	return claimed(row, err, usedAt, d.Binding, "confirmation.decide")
}

// ConfirmationGet returns the confirmation whose token hash is tokenHash,
// used or not, if it belongs to org (ErrConfirmationNotFound otherwise).
func (s *Store) ConfirmationGet(ctx context.Context, org, tokenHash string) (*Confirmation, error) {
	row, err := s.b.ConfirmationGet(ctx, tokenHash)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return nil, fmt.Errorf("store: confirmation.get: %w", ErrConfirmationNotFound)
	case err != nil:
		return nil, fmt.Errorf("store: confirmation.get: %w", err)
	case row.Org != org:
		return nil, fmt.Errorf("store: confirmation.get: %w", ErrConfirmationNotFound)
	}
	return fromConfirmationRow(row), nil
}

// ConfirmationsPending lists the unexpired (ExpiresAt after now), unused
// confirmations of org, newest first, at most limit of them (limit <= 0
// means 100; at most 1000).
func (s *Store) ConfirmationsPending(ctx context.Context, org string, now time.Time, limit int) ([]Confirmation, error) {
	if org == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "confirmations pending: org is empty; name the organization whose confirmations to list")
	}
	if limit <= 0 {
		limit = DefaultConfirmationLimit
	}
	limit = min(limit, MaxConfirmationLimit)
	at, ok := nanos(now)
	if !ok {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "confirmations pending: time %s is out of range", now)
	}
	rows, err := s.b.ConfirmationsPending(ctx, org, at, limit)
	if err != nil {
		return nil, fmt.Errorf("store: confirmations.pending org=%q: %w", org, err)
	}
	out := make([]Confirmation, len(rows))
	for i := range rows {
		out[i] = *fromConfirmationRow(&rows[i])
	}
	return out, nil
}

// short is the first 12 digits of a digest, for messages.
func short(digest string) string {
	if digest == "" {
		return "(none)"
	}
	return digest[:min(12, len(digest))]
}
