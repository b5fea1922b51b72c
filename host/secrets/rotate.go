package secrets

import (
	"context"
	"errors"
	"fmt"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

// RotateReport is what a rotation did.
type RotateReport struct {
	Resealed int // values now sealed under the new key
	Changed  int // values set or deleted meanwhile, left to whoever set them (under either key)
}

// rotatePage is how many secrets a rotation reads at once.
const rotatePage = 200

// Rotate re-seals every stored secret (every organization's and the
// operator's) under to, opening each with whichever of from sealed it:
// the operator supplies keys, never plaintexts. It is safe while replicas
// serve, and resumable:
//
//   - each value is replaced by a compare-and-swap on the key id and
//     nonce it was read with (store.SecretReseal), so a value a replica
//     sets meanwhile is never overwritten with the older one;
//   - a value already under to is not read again, so a rotation that
//     stopped (a crash, a signal) is finished by running it again;
//   - replicas open values under both keys while it runs, when each is
//     configured with one as its key and the other among its old keys
//     (Vault.WithOldKeys; secrets_old_key_files): the order an operator
//     follows is in docs/OPERATIONS.md and README ("Rotating the
//     secrets key").
//
// A value no key of from opens stops the rotation with an error naming
// it (and the key id that sealed it); what was re-sealed stays so.
func Rotate(ctx context.Context, st *store.Store, from []*Key, to *Key, who Actor, rec Recorder) (RotateReport, error) {
	var r RotateReport
	if to == nil {
		return r, fmt.Errorf("secrets: rotate: %w", ErrNoKey)
	}
	keys := map[string]*Key{}
	for _, k := range from {
		if k != nil {
			keys[k.ID()] = k
		}
	}
	afterOrg, afterName := "", ""
	for {
		page, err := st.SecretsNotUnder(ctx, to.ID(), afterOrg, afterName, rotatePage)
		if err != nil {
			return r, fmt.Errorf("secrets: rotate: %w", err)
		}
		for _, sec := range page {
			afterOrg, afterName = sec.Org, sec.Name
			k := keys[sec.KeyID]
			if k == nil {
				return r, fmt.Errorf("secrets: rotate: secret %s of %s is sealed under key %s, which is not among the old keys given; give that key too (then run the rotation again: it goes on where it stopped)",
					sec.Name, orgName(sec.Org), sec.KeyID)
			}
			value, err := k.Open(sec.Org, sec.Name, sec.Ciphertext, sec.Nonce)
			if err != nil {
				return r, fmt.Errorf("secrets: rotate: secret %s of %s: %w", sec.Name, orgName(sec.Org), err)
			}
			ct, nonce, err := to.Seal(sec.Org, sec.Name, value)
			clear(value)
			if err != nil {
				return r, err
			}
			err = st.SecretReseal(ctx, store.Secret{Org: sec.Org, Name: sec.Name, Ciphertext: ct, Nonce: nonce, KeyID: to.ID()}, sec.KeyID, sec.Nonce)
			switch {
			case errors.Is(err, store.ErrSecretChanged):
				r.Changed++
				continue
			case err != nil:
				return r, fmt.Errorf("secrets: rotate: %w", err)
			}
			r.Resealed++
		}
		if len(page) < rotatePage {
			break
		}
	}
	if rec != nil {
		rec.Record(ctx, audit.Event{Kind: audit.KindSecret, Decision: audit.Allow, User: who.User, Org: who.Org, Rule: "secrets key rotate",
			Reason: fmt.Sprintf("%d secrets re-sealed under key %s by %s (%d changed meanwhile)", r.Resealed, to.ID(), who, r.Changed),
			Attrs:  map[string]string{"key_id": to.ID(), "resealed": fmt.Sprint(r.Resealed), "by": who.String()}})
	}
	return r, nil
}
