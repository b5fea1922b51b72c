package server

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy"
)

// TestVerifyWebhook: each scheme's signature over the body it read, its
// timestamp within the tolerance either way, and the hostile headers:
// missing parts, a signature of another body or secret, a timestamp in
// the future or the past, many signatures, oversized headers, a whsec_
// secret that is not base64. Each refusal says why (for the trail) and
// tells the caller only that the signature does not verify.
func TestVerifyWebhook(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"a":1}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	gh := &policy.Webhook{Scheme: policy.WebhookGitHub, Secret: "s"}
	stripe := &policy.Webhook{Scheme: policy.WebhookStripe, Secret: "s", Tolerance: policy.Duration(5 * time.Minute)}
	std := &policy.Webhook{Scheme: policy.WebhookStandard, Secret: "s"}
	key := []byte("whsec_" + base64.StdEncoding.EncodeToString([]byte("k")))
	stdSig := func(id, ts string, b []byte) string {
		return "v1," + base64.StdEncoding.EncodeToString(hmacSHA256([]byte("k"), []byte(id+"."+ts+"."), b))
	}
	mac := func(secret string, parts ...string) string {
		p := make([][]byte, len(parts))
		for i, s := range parts {
			p[i] = []byte(s)
		}
		return hex.EncodeToString(hmacSHA256([]byte(secret), p...))
	}
	for _, tt := range []struct {
		name    string
		w       *policy.Webhook
		secret  []byte
		headers []string
		ok      bool
		reason  string
	}{
		{"github", gh, []byte("s"), []string{"X-Hub-Signature-256", "sha256=" + mac("s", string(body))}, true, ""},
		{"github other secret", gh, []byte("t"), []string{"X-Hub-Signature-256", "sha256=" + mac("s", string(body))}, false, "does not match"},
		{"github no prefix", gh, []byte("s"), []string{"X-Hub-Signature-256", mac("s", string(body))}, false, "no X-Hub-Signature-256"},
		{"github sha1", gh, []byte("s"), []string{"X-Hub-Signature", "sha1=00"}, false, "no X-Hub-Signature-256"},
		{"github huge", gh, []byte("s"), []string{"X-Hub-Signature-256", "sha256=" + strings.Repeat("0", 2000)}, false, "over 1024 bytes"},
		{"stripe", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + ts + ",v1=" + mac("s", ts+".", string(body))}, true, ""},
		{"stripe second v1", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + ts + ",v1=00,v0=11,v1=" + mac("s", ts+".", string(body))}, true, ""},
		{"stripe 4 minutes early", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + at(4*time.Minute) + ",v1=" + mac("s", at(4*time.Minute)+".", string(body))}, true, ""},
		{"stripe 6 minutes late", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + at(-6*time.Minute) + ",v1=" + mac("s", at(-6*time.Minute)+".", string(body))}, false, "more than the tolerance"},
		{"stripe in the future", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + at(time.Hour) + ",v1=" + mac("s", at(time.Hour)+".", string(body))}, false, "more than the tolerance"},
		{"stripe timestamp not signed", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + ts + ",v1=" + mac("s", string(body))}, false, "no v1 signature"},
		{"stripe not a number", stripe, []byte("s"), []string{"Stripe-Signature", "t=soon,v1=00"}, false, "not a number"},
		{"stripe no t", stripe, []byte("s"), []string{"Stripe-Signature", "v1=00"}, false, "no Stripe-Signature"},
		{"stripe many parts", stripe, []byte("s"), []string{"Stripe-Signature", "t=" + ts + strings.Repeat(",v1=00", 40)}, false, "too many parts"},
		{"standard", std, key, []string{"Webhook-Id", "m1", "Webhook-Timestamp", ts, "Webhook-Signature", stdSig("m1", ts, body)}, true, ""},
		{"standard among others", std, key, []string{"Webhook-Id", "m1", "Webhook-Timestamp", ts, "Webhook-Signature", "v2,xx v1,AAAA " + stdSig("m1", ts, body)}, true, ""},
		{"standard raw secret", std, []byte("k"), []string{"Webhook-Id", "m1", "Webhook-Timestamp", ts, "Webhook-Signature", stdSig("m1", ts, body)}, true, ""},
		{"standard other id", std, key, []string{"Webhook-Id", "m2", "Webhook-Timestamp", ts, "Webhook-Signature", stdSig("m1", ts, body)}, false, "no v1 signature"},
		{"standard other body", std, key, []string{"Webhook-Id", "m1", "Webhook-Timestamp", ts, "Webhook-Signature", stdSig("m1", ts, []byte("{}"))}, false, "no v1 signature"},
		{"standard stale", std, key, []string{"Webhook-Id", "m1", "Webhook-Timestamp", at(-time.Hour), "Webhook-Signature", stdSig("m1", at(-time.Hour), body)}, false, "more than the tolerance"},
		{"standard no id", std, key, []string{"Webhook-Timestamp", ts, "Webhook-Signature", stdSig("", ts, body)}, false, "no webhook-id"},
		{"standard bad whsec", std, []byte("whsec_!!"), []string{"Webhook-Id", "m1", "Webhook-Timestamp", ts, "Webhook-Signature", stdSig("m1", ts, body)}, false, "not base64"},
		{"standard past 8 signatures", std, key, []string{"Webhook-Id", "m1", "Webhook-Timestamp", ts, "Webhook-Signature", strings.Repeat("v1,AAAA ", 8) + stdSig("m1", ts, body)}, false, "no v1 signature"},
	} {
		h := http.Header{}
		for i := 0; i+1 < len(tt.headers); i += 2 {
			h.Set(tt.headers[i], tt.headers[i+1])
		}
		v, err := verifyWebhook(tt.w, tt.secret, h, body, now)
		if tt.ok != (err == nil) || !tt.ok && (err != errWebhookSignature || !strings.Contains(v.reason, tt.reason)) || tt.ok && v.replay == "" {
			t.Errorf("%s: %+v %v; want ok %v, reason %q", tt.name, v, err, tt.ok, tt.reason)
		}
	}
	// The replay identity: a sender's retry (a new timestamp) is a new
	// delivery; the same delivery is the same.
	h1, h2 := http.Header{}, http.Header{}
	h1.Set("Stripe-Signature", "t="+ts+",v1="+mac("s", ts+".", string(body)))
	h2.Set("Stripe-Signature", "t="+at(time.Second)+",v1="+mac("s", at(time.Second)+".", string(body)))
	a, _ := verifyWebhook(stripe, []byte("s"), h1, body, now)
	b, _ := verifyWebhook(stripe, []byte("s"), h2, body, now)
	c, _ := verifyWebhook(stripe, []byte("s"), h1, body, now)
	if a.replay == b.replay || a.replay != c.replay {
		t.Errorf("replay identities: %q %q %q", a.replay, b.replay, c.replay)
	}
	if k := webhookReplayKey(strings.Repeat("o", 128), "m", "POST /h", strings.Repeat("x", 5000)); len(k) > 256 {
		t.Errorf("replay key of %d bytes", len(k))
	}
	if webhookReplayWindow(gh) != 5*time.Minute || webhookReplayWindow(stripe) != 10*time.Minute {
		t.Errorf("replay windows: %s %s", webhookReplayWindow(gh), webhookReplayWindow(stripe))
	}
}
