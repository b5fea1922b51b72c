package host

import (
	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/host/ops"
)

// DefaultMediaQuota is the bytes of media items each organization may
// store when MediaConfig.QuotaBytes is 0.
const DefaultMediaQuota = 1 << 30

// MediaConfig configures the media family (media.put, .fetch, .get, .info,
// .thumbnail; host/ops/media.go).
type MediaConfig struct {
	// QuotaBytes bounds the bytes of all the media items one
	// organization stores, across its modules (a thumbnail is an item
	// too). 0: DefaultMediaQuota; negative: no quota.
	QuotaBytes int64
	// QuotaKnob is the setting a refusal at the quota names, so that a
	// guest's error tells the operator what to change. Default
	// "host.Config.Media.QuotaBytes"; moat serve names its own.
	QuotaKnob string
	// Decodes bounds the memory image decodes (thumbnails) hold at once.
	// Hosts of one process should share one, as moat serve's do: the
	// bound is the machine's. nil: one bound for every host of the
	// process that names none (media.DefaultDecodeBytes).
	Decodes *media.DecodeSlots
}

// mediaLimits is what the media family's ops get in their Env.
func (c MediaConfig) mediaLimits() ops.MediaLimits {
	l := ops.MediaLimits{Quota: c.QuotaBytes, QuotaKnob: c.QuotaKnob, Decodes: c.Decodes}
	switch {
	case l.Quota == 0:
		l.Quota = DefaultMediaQuota
	case l.Quota < 0:
		l.Quota = 0
	}
	if l.QuotaKnob == "" {
		l.QuotaKnob = "host.Config.Media.QuotaBytes"
	}
	return l
}
