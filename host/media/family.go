package media

import (
	"errors"
	"net/url"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// The media family: images, audio, video and PDF documents kept per
// organization (abi/media.go has the rules). It registers itself here,
// beside Ingest, Thumbnail and DecodeSlots, rather than in host/ops: the
// op table then does not import the decoders, and the family's
// configuration can carry the process's DecodeSlots. The capability is
// granted as a whole ("media"); media.fetch's URL is checked by the http
// family's client (ops.OutboundOf) against the module's http grants, as
// http.fetch's is, so a module granted media but no http target can
// fetch nothing. Every byte that becomes an item, put by the guest or
// downloaded, takes the same path: Ingest (type sniffed, structure
// checked, bombs refused from the header, image metadata stripped), then
// the store under the organization's quota. Puts, fetches and thumbnails
// store an item, so the host audits each with a mutation id and the
// item's id.
//
// The scope is the caller's organization (ops.Env), never the request:
// an id of another organization's item is not found, exactly as an id no
// organization has, so a guest cannot learn what others keep.

func init() {
	ops.RegisterFamily(ops.Family{
		Name: "media", Capability: policy.CapabilitySpec{Name: "media"},
		Config: func() any { return &FamilyConfig{} },
		Provision: func(_ *ops.ProvisionContext, cfg any) (any, error) {
			return cfg.(*FamilyConfig).limits(), nil
		},
		Ops: []ops.Op{
			{Name: abi.OpMediaPut, Func: ops.Typed(mediaPut), Mutates: true},
			{Name: abi.OpMediaFetch, Func: ops.Typed(mediaFetch), Mutates: true, LeavesSandbox: true},
			{Name: abi.OpMediaGet, Func: ops.Typed(mediaGet)},
			{Name: abi.OpMediaInfo, Func: ops.Typed(mediaInfo)},
			{Name: abi.OpMediaThumbnail, Func: ops.Typed(mediaThumbnail), Mutates: true},
		},
	})
}

// DefaultQuota is the bytes of media items each organization may store
// when FamilyConfig.QuotaBytes is 0.
const DefaultQuota = 1 << 30

// FamilyConfig configures the media family: host.Config.Families["media"],
// and the family's keys of the media: section of moat-server.yaml (the
// server's MediaConfig holds it inline, beside its routes' keys). It is
// the one definition of these settings: their yaml names are the knobs a
// guest's error cites.
type FamilyConfig struct {
	// QuotaBytes bounds the bytes of all the media items one
	// organization stores, across its modules (a thumbnail is an item
	// too); a put or thumbnail past it is refused with
	// resource_exhausted naming media.quota_bytes. 0: DefaultQuota.
	QuotaBytes policy.ByteSize `yaml:"quota_bytes"`
	// DecodeBytes bounds the memory this host's media work holds at
	// once, all organizations together: each image decode (thumbnails)
	// takes what its image's header says it will need before it starts,
	// each media.fetch twice abi.MaxMediaBytes (the body and its ingested
	// copy) before it sends, and both wait within their invocation's
	// deadline for the rest. 0: DefaultDecodeBytes. Ignored when Decodes
	// is set.
	DecodeBytes policy.ByteSize `yaml:"decode_bytes"`
	// NoQuota lifts the quota, for an embedder that wants none.
	NoQuota bool `yaml:"-"`
	// Decodes is the bound itself, for hosts of one process that share
	// one, as moat serve's do: the bound is the machine's. Nil, with
	// DecodeBytes 0: one bound for every host of the process that names
	// none.
	Decodes *DecodeSlots `yaml:"-"`
}

// quotaKnob is the setting a refusal at the quota names: the family's
// section path, the same whether the host is moat serve's, moat run's or
// an embedder's.
const quotaKnob = "media.quota_bytes"

// familyLimits is the media family's service: the quota of each
// organization and the bound on decoding shared by its hosts.
type familyLimits struct {
	quota   int64 // 0: none
	decodes *DecodeSlots
}

func (c *FamilyConfig) limits() *familyLimits {
	l := &familyLimits{quota: int64(c.QuotaBytes), decodes: c.Decodes}
	switch {
	case c.NoQuota:
		l.quota = 0
	case l.quota == 0:
		l.quota = DefaultQuota
	}
	if l.decodes == nil {
		if c.DecodeBytes != 0 {
			l.decodes = NewDecodeSlots(int64(c.DecodeBytes))
		} else {
			l.decodes = defaultDecodes
		}
	}
	return l
}

// defaultDecodes is the decode bound of hosts that configure none.
var defaultDecodes = NewDecodeSlots(0)

// familyService is the media family's service for env's host: its
// provisioned limits, or the defaults for an Env made without Services.
func familyService(env *ops.Env) *familyLimits {
	if l, ok := ops.ServiceOf[*familyLimits](env, "media"); ok {
		return l
	}
	return (&FamilyConfig{}).limits()
}

func mediaPut(env *ops.Env, req *abi.MediaPutRequest) (*abi.MediaInfo, error) {
	if len(req.Data) > abi.MaxMediaInlineBytes {
		return nil, abi.Errorf(abi.CodeTooLarge, "%s: the data is %d bytes; a put carries at most %d (abi.MaxMediaInlineBytes); "+
			"have the host download larger items with %s", abi.OpMediaPut, len(req.Data), abi.MaxMediaInlineBytes, abi.OpMediaFetch)
	}
	return keep(env, abi.OpMediaPut, req.Data, req.Type)
}

func mediaFetch(env *ops.Env, req *abi.MediaFetchRequest) (*abi.MediaInfo, error) {
	if req.URL == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: url is empty; name the URL to download", abi.OpMediaFetch)
	}
	out := ops.OutboundOf(env)
	if out == nil {
		return nil, abi.Errorf(abi.CodeDenied, "%s: this host sends no requests (it has no outbound HTTP client), so it downloads nothing", abi.OpMediaFetch)
	}
	// The body and its ingested copy are held in memory: take room for
	// them from the host-wide bound first, so that concurrent downloads
	// wait for each other instead of adding up past it.
	release, err := familyService(env).decodes.Hold(env.Context, FetchHoldBytes, abi.OpMediaFetch)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := out.Fetch(env, &abi.HTTPFetchRequest{URL: req.URL}, abi.MaxMediaBytes)
	if err != nil {
		return nil, err
	}
	if resp.Status < 200 || resp.Status > 299 {
		code := abi.CodeUnavailable
		if resp.Status == 404 || resp.Status == 410 {
			code = abi.CodeNotFound
		}
		return nil, abi.Errorf(code, "%s: %s answered status %d; nothing was stored", abi.OpMediaFetch, hostOf(req.URL), resp.Status)
	}
	// The origin's Content-Type is not asked: the bytes say what they are.
	return keep(env, abi.OpMediaFetch, resp.Body, "")
}

// hostOf names a URL's host for a message, never its path or query
// (which may carry a token the guest put there).
func hostOf(u string) string {
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return p.Host
	}
	return "the server"
}

// keep is the path every new item takes: checked and stripped by
// Ingest, stored under the organization's quota, its id recorded for
// the audit trail.
func keep(env *ops.Env, op string, data []byte, claimed string) (*abi.MediaInfo, error) {
	it, err := Ingest(data, claimed)
	if err != nil {
		return nil, opError(op, err)
	}
	return storeItem(env, op, it)
}

// storeItem stores an item Ingest or Thumbnail made.
func storeItem(env *ops.Env, op string, it *Item) (*abi.MediaInfo, error) {
	stored, _, err := env.Store.MediaPut(env.Context, store.MediaNew{
		Org: env.Principal.Org, Module: env.Module, User: env.Principal.User,
		Type: it.Type, Width: it.Width, Height: it.Height, Data: it.Data,
	}, familyService(env).quota)
	if err != nil {
		var ae *abi.Error
		if errors.As(err, &ae) && ae.Code == abi.CodeResourceExhausted {
			return nil, abi.Errorf(ae.Code, "%s: %s; the operator sets the quota (%s)", op, ae.Message, quotaKnob)
		}
		return nil, storeError(env, op, err)
	}
	env.SetSubject(stored.ID)
	return infoOf(stored), nil
}

func mediaGet(env *ops.Env, req *abi.MediaGetRequest) (*abi.MediaGetResponse, error) {
	it, data, err := env.Store.MediaRead(env.Context, env.Principal.Org, req.ID, abi.MaxMediaInlineBytes)
	if err != nil {
		var ae *abi.Error
		if errors.As(err, &ae) && ae.Code == abi.CodeTooLarge {
			return nil, abi.Errorf(abi.CodeTooLarge, "%s: the item is larger than the %d bytes a reply carries (abi.MaxMediaInlineBytes); "+
				"clients fetch it from /v1/media/%s", abi.OpMediaGet, abi.MaxMediaInlineBytes, req.ID)
		}
		return nil, storeError(env, abi.OpMediaGet, err)
	}
	return &abi.MediaGetResponse{MediaInfo: *infoOf(it), Data: data}, nil
}

func mediaInfo(env *ops.Env, req *abi.MediaInfoRequest) (*abi.MediaInfo, error) {
	it, err := env.Store.MediaGet(env.Context, env.Principal.Org, req.ID)
	if err != nil {
		return nil, storeError(env, abi.OpMediaInfo, err)
	}
	return infoOf(it), nil
}

// mediaThumbnail makes a PNG of an image item (Thumbnail, under the
// host's decode bound) and keeps it as an item of its own, by the same
// path as a put: the same thumbnail asked for twice is one item.
func mediaThumbnail(env *ops.Env, req *abi.MediaThumbnailRequest) (*abi.MediaInfo, error) {
	if !store.ValidMediaID(req.ID) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "%s: id must be an item's id, 64 lowercase hex digits", abi.OpMediaThumbnail)
	}
	src, data, err := env.Store.MediaRead(env.Context, env.Principal.Org, req.ID, abi.MaxMediaBytes)
	if err != nil {
		return nil, storeError(env, abi.OpMediaThumbnail, err)
	}
	th, err := Thumbnail(env.Context, familyService(env).decodes, data, src.Type, req.Width, req.Height, req.Fit)
	if err != nil {
		return nil, opError(abi.OpMediaThumbnail, err)
	}
	return storeItem(env, abi.OpMediaThumbnail, th)
}

func infoOf(it store.MediaItem) *abi.MediaInfo {
	return &abi.MediaInfo{ID: it.ID, Type: it.Type, Size: it.Size, Width: it.Width, Height: it.Height}
}

// storeError turns a store failure into the guest's error: an item the
// organization does not have is not_found, whether another organization
// has it or not; an *abi.Error (a validation) keeps its code under the
// op's name; any other failure is unavailable, without leaking paths or
// SQL to the guest (the full error goes to the host log), as every
// family's store errors are.
func storeError(env *ops.Env, op string, err error) error {
	if errors.Is(err, store.ErrMediaNotFound) {
		return abi.Errorf(abi.CodeNotFound, "%s: this organization has no such media item", op)
	}
	var ae *abi.Error
	if errors.As(err, &ae) {
		return opError(op, ae)
	}
	env.Log().Error("store failure", "op", op, "err", err)
	return &abi.Error{Code: abi.CodeUnavailable, Message: op + ": storage is unavailable"}
}

// opError puts the op's name in front of an *abi.Error's message; any
// other error is a host failure.
func opError(op string, err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return &abi.Error{Code: ae.Code, Message: op + ": " + ae.Message}
	}
	return abi.Errorf(abi.CodeInternal, "%s failed inside the host", op)
}
