package media

import (
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/policy"
)

// TestFamilyConfig: the media family is registered from here with
// FamilyConfig as its configuration, whose yaml names are the keys of
// moat-server.yaml's media: section and the knobs a guest's refusals name
// (media.quota_bytes, media.decode_bytes): moving the family out of
// host/ops must not rename them. Each configuration provisions the
// limits its comment promises.
func TestFamilyConfig(t *testing.T) {
	cfg, ok := ops.FamilyConfig("media")
	if !ok {
		t.Fatal("no media family registered")
	}
	if _, ok := cfg.(*FamilyConfig); !ok {
		t.Fatalf("the media family's configuration is a %T, want *media.FamilyConfig", cfg)
	}
	typ := reflect.TypeFor[FamilyConfig]()
	for field, tag := range map[string]string{"QuotaBytes": "quota_bytes", "DecodeBytes": "decode_bytes", "NoQuota": "-", "Decodes": "-"} {
		f, ok := typ.FieldByName(field)
		if !ok || f.Tag.Get("yaml") != tag {
			t.Errorf("FamilyConfig.%s's yaml name is %q, want %q (moat-server.yaml's media: section)", field, f.Tag.Get("yaml"), tag)
		}
	}
	if quotaKnob != "media.quota_bytes" {
		t.Errorf("a quota refusal names %q, want media.quota_bytes", quotaKnob)
	}

	shared := NewDecodeSlots(512 << 20)
	for _, tc := range []struct {
		name      string
		cfg       FamilyConfig
		wantQuota int64
		decodes   func(*DecodeSlots) bool
	}{
		{"defaults", FamilyConfig{}, DefaultQuota, func(d *DecodeSlots) bool { return d == defaultDecodes }},
		{"a quota", FamilyConfig{QuotaBytes: 4 << 20}, 4 << 20, func(d *DecodeSlots) bool { return d == defaultDecodes }},
		{"no quota wins over a quota", FamilyConfig{QuotaBytes: 4 << 20, NoQuota: true}, 0, func(d *DecodeSlots) bool { return d == defaultDecodes }},
		{"a decode bound of its own", FamilyConfig{DecodeBytes: policy.ByteSize(768 << 20)}, DefaultQuota, func(d *DecodeSlots) bool { return d != defaultDecodes && d != shared && d != nil }},
		{"the process's bound wins over decode_bytes", FamilyConfig{DecodeBytes: policy.ByteSize(768 << 20), Decodes: shared}, DefaultQuota, func(d *DecodeSlots) bool { return d == shared }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.cfg.limits()
			if l.quota != tc.wantQuota {
				t.Errorf("quota %d, want %d", l.quota, tc.wantQuota)
			}
			if !tc.decodes(l.decodes) {
				t.Errorf("decode bound %p (default %p, shared %p)", l.decodes, defaultDecodes, shared)
			}
		})
	}
}
