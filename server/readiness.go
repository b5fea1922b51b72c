package server

import (
	"maps"
	"slices"
)

// Confinement is what the server's own kernel confinement applied and
// what it runs without (the layer names of kernel.HostReport), for
// /readyz. The reasons stay in the log, the audit trail (kind
// confinement) and `moat doctor`: /readyz answers without credentials.
type Confinement struct {
	Applied []string `json:"applied"`
	Missing []string `json:"missing"`
}

// SetConfinement records what the server's confinement applied and
// lacks (the keys of kernel.HostReport.Missing), so /readyz says what
// this replica cannot do instead of a bare "ready": an operator who
// runs moat in a container learns there which layers the runtime denies.
func (s *Server) SetConfinement(applied []string, missing map[string]string) {
	c := &Confinement{Applied: slices.Clone(applied), Missing: slices.Sorted(maps.Keys(missing))}
	if c.Applied == nil {
		c.Applied = []string{}
	}
	if c.Missing == nil {
		c.Missing = []string{}
	}
	s.confinement.Store(c)
}

// ReadyJSON is /readyz's body when the server takes traffic. Confinement
// is absent until the server has confined itself (moat serve does once
// its port is bound); Languages names the code-execution languages this
// replica can run and Unavailable those it cannot (their toolchain is not
// provisioned here: GET /v1/languages says why and how to fix it).
type ReadyJSON struct {
	Status      string       `json:"status"`
	Confinement *Confinement `json:"confinement,omitempty"`
	Languages   []string     `json:"languages"`
	Unavailable []string     `json:"unavailable_languages"`
}

func (s *Server) readyBody() ReadyJSON {
	r := ReadyJSON{Status: "ready", Confinement: s.confinement.Load(), Languages: []string{}, Unavailable: []string{}}
	if s.exec != nil {
		for _, l := range s.exec.Languages() {
			if l.Available {
				r.Languages = append(r.Languages, l.Name)
			} else {
				r.Unavailable = append(r.Unavailable, l.Name)
			}
		}
	}
	return r
}
