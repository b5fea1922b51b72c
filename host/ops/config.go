package ops

import "github.com/moat-sandbox/moat/abi"

// config.get reads the configuration the module was loaded with. It is the
// cheapest op and the one the round-trip benchmark measures.

func init() {
	RegisterFamily(Family{Name: "config", Ops: []Op{{Name: abi.OpConfigGet, Func: Typed(configGet)}}})
}

func configGet(env *Env, req *abi.ConfigGetRequest) (*abi.ConfigGetResponse, error) {
	if req.Key == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "config.get: key is empty")
	}
	v, ok := env.Config[req.Key]
	return &abi.ConfigGetResponse{Value: v, Found: ok}, nil
}
