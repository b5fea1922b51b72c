package ops

import (
	"context"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// The interfaces through which op families reach what the host holds for
// them, where one family serves another: the http family's client sends
// media.fetch's download too, and secrets are read by the http family
// (headers a grant injects) and the ai family (provider keys). Each is a
// family's service or view of the module, found by name (ServiceOf,
// OutboundOf); nil means this host offers none.

// Outbound sends the requests of ops that leave the sandbox over HTTP
// (http.fetch, media.fetch), under the http family's rules: the module's
// http grants on every hop, addresses checked when dialled, headers a
// grant injects added and scrubbed from the reply, the request audited.
// maxBytes bounds the response body (a longer one is CodeTooLarge); it
// overrides req.MaxBytes, which a caller other than http.fetch leaves 0.
type Outbound interface {
	Fetch(env *Env, req *abi.HTTPFetchRequest, maxBytes int64) (*abi.HTTPFetchResponse, error)
}

// SecretSource reads the operator's secrets: org "" is the operator's own
// (an AI provider's key), any other an organization's (a header a grant
// injects into that organization's requests). A value read from it must
// never reach a guest, a log line, an audit record or an error message.
type SecretSource interface {
	Secret(ctx context.Context, org, name string) ([]byte, error)
}

func init() {
	RegisterFamily(Family{
		Name:   "secrets",
		Config: func() any { return &SecretsConfig{} },
		Provision: func(_ *ProvisionContext, cfg any) (any, error) {
			if src := cfg.(*SecretsConfig).Source; src != nil {
				return src, nil
			}
			return nil, nil
		},
	})
}

// SecretsConfig configures the secrets family, which has no ops: it
// serves the families that read the operator's secrets (http's injected
// headers, ai's provider keys), which ask for it by name when they are
// provisioned (secretsService).
type SecretsConfig struct {
	// Source is where the secrets are read (package host/secrets' Vault).
	// Nil: none, and a request whose grant injects a secret is refused.
	Source SecretSource `yaml:"-"`
}

// secretsService is the secrets family's source, for a family being
// provisioned; nil when the host has none.
func secretsService(ctx *ProvisionContext) (SecretSource, error) {
	v, err := ctx.Service("secrets")
	src, _ := v.(SecretSource)
	return src, err
}

// ErrSecretNotFound is what a SecretSource returns, wrapped, for a name
// that has no secret in that scope: the store's own sentinel, one error
// whether a source reads the store or not.
var ErrSecretNotFound = store.ErrSecretNotFound
