package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

// Webhook signatures (routes with auth: webhook). Each scheme is an
// HMAC-SHA256 under the secret the sender and the organization share,
// over the body and, for stripe and standard, a timestamp the sender
// signs with it; the server computes the MAC over the body it read
// (bounded by the route's max_body before any hashing) and compares in
// constant time (hmac.Equal). A timestamp farther than the tolerance
// from the server's clock is refused, and so is a delivery seen before
// (webhookReplayKey, remembered in the store by every replica).

// Bounds of the signature headers: a header longer than these, or with
// more signatures than maxWebhookSignatures, is refused unread.
const (
	maxWebhookHeaderBytes = 1024
	maxWebhookSignatures  = 8
)

// errWebhookSignature is every signature failure as the sender sees it:
// the reason goes to the audit trail, not to a caller who may be probing.
var errWebhookSignature = errors.New("the webhook signature does not verify")

// webhookVerdict is a checked delivery: replay is what identifies it for
// the replay check, reason why it was refused (when err is set).
type webhookVerdict struct {
	replay string
	reason string
}

// verifyWebhook checks a delivery's signature under secret at now. It
// returns the delivery's identity (for the replay check), or
// errWebhookSignature with the reason for the audit trail.
func verifyWebhook(w *policy.Webhook, secret []byte, h http.Header, body []byte, now time.Time) (webhookVerdict, error) {
	fail := func(reason string) (webhookVerdict, error) {
		return webhookVerdict{reason: reason}, errWebhookSignature
	}
	for _, name := range []string{"X-Hub-Signature-256", "Stripe-Signature", "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		if len(h.Get(name)) > maxWebhookHeaderBytes {
			return fail(name + " is over 1024 bytes")
		}
	}
	tolerance := w.ToleranceOrDefault()
	inTime := func(ts string) (string, bool) {
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return "the timestamp " + strconv.Quote(truncate(ts, 32)) + " is not a number of seconds", false
		}
		d := now.Sub(time.Unix(sec, 0))
		if d > tolerance || -d > tolerance {
			return "the timestamp is " + d.Round(time.Second).String() + " from the server's clock, more than the tolerance " + tolerance.String(), false
		}
		return "", true
	}
	switch w.Scheme {
	case policy.WebhookGitHub:
		sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
		if !ok {
			return fail("no X-Hub-Signature-256: sha256=HEX header")
		}
		got, err := hex.DecodeString(sig)
		if err != nil || !hmac.Equal(got, hmacSHA256(secret, body)) {
			return fail("X-Hub-Signature-256 does not match the body under the secret")
		}
		return webhookVerdict{replay: "github\x00" + sig}, nil

	case policy.WebhookStripe:
		var ts string
		var sigs []string
		for i, part := range strings.Split(h.Get("Stripe-Signature"), ",") {
			if i >= 2*maxWebhookSignatures {
				return fail("Stripe-Signature has too many parts")
			}
			k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			switch k {
			case "t":
				ts = v
			case "v1":
				sigs = append(sigs, v)
			}
		}
		if ts == "" || len(sigs) == 0 {
			return fail("no Stripe-Signature: t=UNIX,v1=HEX header")
		}
		if reason, ok := inTime(ts); !ok {
			return fail(reason)
		}
		want := hmacSHA256(secret, []byte(ts+"."), body)
		for _, s := range sigs {
			if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
				return webhookVerdict{replay: "stripe\x00" + ts + "\x00" + s}, nil
			}
		}
		return fail("no v1 signature of Stripe-Signature matches the timestamp and body under the secret")

	case policy.WebhookStandard:
		id, ts := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp")
		if id == "" || ts == "" || h.Get("Webhook-Signature") == "" {
			return fail("no webhook-id, webhook-timestamp and webhook-signature headers")
		}
		if reason, ok := inTime(ts); !ok {
			return fail(reason)
		}
		key := secret
		if b64, ok := strings.CutPrefix(string(secret), "whsec_"); ok {
			k, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return fail("the secret starts with whsec_ but the rest is not base64")
			}
			key = k
		}
		want := hmacSHA256(key, []byte(id+"."+ts+"."), body)
		for i, s := range strings.Fields(h.Get("Webhook-Signature")) {
			if i >= maxWebhookSignatures {
				break
			}
			v, sig, _ := strings.Cut(s, ",")
			if v != "v1" {
				continue
			}
			if got, err := base64.StdEncoding.DecodeString(sig); err == nil && hmac.Equal(got, want) {
				return webhookVerdict{replay: "standard\x00" + id + "\x00" + ts}, nil
			}
		}
		return fail("no v1 signature of webhook-signature matches the id, timestamp and body under the secret")
	}
	return fail("unknown scheme " + w.Scheme)
}

// hmacSHA256 is the HMAC-SHA256 of the parts, in order, under key.
func hmacSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// webhookReplayWindow is how long a delivery is remembered: a signed
// timestamp is accepted from tolerance before to tolerance after the
// clock, so twice that; GitHub signs no timestamp, so its tolerance is
// the whole memory.
func webhookReplayWindow(w *policy.Webhook) time.Duration {
	if w.Scheme == policy.WebhookGitHub {
		return w.ToleranceOrDefault()
	}
	return 2 * w.ToleranceOrDefault()
}

// webhookReplayKey is the store's key of a delivery to one route of one
// module: a hash, so that the key is bounded whatever the headers held.
func webhookReplayKey(org, module, route, id string) string {
	sum := sha256.Sum256([]byte(org + "\x00" + module + "\x00" + route + "\x00" + id))
	return "webhook:" + hex.EncodeToString(sum[:])
}
