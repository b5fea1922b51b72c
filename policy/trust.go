package policy

import "fmt"

// TrustedPublicKeys parses the profile's trusted_keys into the map Verify
// takes, keyed by the names the profile gives them.
func (p *Profile) TrustedPublicKeys() (map[string]PublicKey, error) {
	keys := make(map[string]PublicKey, len(p.TrustedKeys))
	for _, tk := range p.TrustedKeys {
		k, err := ParsePublicKey(tk.Key)
		if err != nil {
			return nil, fmt.Errorf("profile %s: trusted key %s: %w", p.Name, tk.Name, err)
		}
		keys[tk.Name] = k
	}
	return keys, nil
}
