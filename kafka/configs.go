package kafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// The topic configs served: Kafka's retention settings, the cleanup
// policy parkway has (delete), and parkway's fsync policy under names of
// its own.
const (
	cfgRetentionMs    = "retention.ms"
	cfgRetentionBytes = "retention.bytes"
	cfgCleanupPolicy  = "cleanup.policy"
	cfgFsync          = "parkway.fsync"
	cfgFsyncInterval  = "parkway.fsync.interval.ms"
)

var topicConfigNames = []string{cfgCleanupPolicy, cfgFsync, cfgFsyncInterval, cfgRetentionBytes, cfgRetentionMs}

// setTopicConfig applies one config to c (value nil or del: back to the
// default). Anything parkway does not have is an error, never ignored.
func setTopicConfig(c *parkway.TopicConfig, name string, value *string, del bool) error {
	v := ""
	if value != nil && !del {
		v = *value
	}
	num := func(min int64) (int64, error) {
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return 0, fmt.Errorf("%s %q: a number, at least %d", name, v, min)
		}
		return n, nil
	}
	switch name {
	case cfgRetentionMs:
		n, err := num(-1)
		if err != nil || n > int64(1<<63-1)/int64(time.Millisecond) {
			return fmt.Errorf("%s %q: milliseconds, or -1 for no limit", name, v)
		}
		c.RetentionAge = time.Duration(max(n, 0)) * time.Millisecond
	case cfgRetentionBytes:
		n, err := num(-1)
		if err != nil {
			return err
		}
		c.RetentionBytes = max(n, 0)
	case cfgCleanupPolicy:
		if v != "" && v != "delete" {
			return fmt.Errorf("%s %q: only delete is supported", name, v)
		}
	case cfgFsync:
		i := slices.IndexFunc([]parkway.FsyncPolicy{parkway.FsyncDefault, parkway.FsyncAlways, parkway.FsyncInterval, parkway.FsyncNever},
			func(p parkway.FsyncPolicy) bool { return p.String() == v })
		switch {
		case v == "":
			c.Fsync = parkway.FsyncDefault
		case i < 0:
			return fmt.Errorf("%s %q: default, always, interval or never", name, v)
		default:
			c.Fsync = []parkway.FsyncPolicy{parkway.FsyncDefault, parkway.FsyncAlways, parkway.FsyncInterval, parkway.FsyncNever}[i]
		}
	case cfgFsyncInterval:
		n, err := num(0)
		if err != nil || n > int64(1<<63-1)/int64(time.Millisecond) {
			return fmt.Errorf("%s %q: milliseconds", name, v)
		}
		c.FsyncInterval = time.Duration(n) * time.Millisecond
	default:
		return fmt.Errorf("topic config %q is not supported (%v are)", name, topicConfigNames)
	}
	return nil
}

// topicOptions turns CreateTopics configs into topic options.
func topicOptions(configs []kmsg.CreateTopicsRequestTopicConfig) ([]parkway.TopicOption, error) {
	var c parkway.TopicConfig
	for _, cc := range configs {
		if err := setTopicConfig(&c, cc.Name, cc.Value, false); err != nil {
			return nil, err
		}
	}
	return []parkway.TopicOption{
		parkway.WithRetention(c.RetentionAge, c.RetentionBytes),
		parkway.WithFsync(c.Fsync, c.FsyncInterval),
	}, nil
}

func (s *Server) describeConfigs(ctx context.Context, r *kmsg.DescribeConfigsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range r.Resources {
		dr := kmsg.NewDescribeConfigsResponseResource()
		dr.ResourceType, dr.ResourceName = rr.ResourceType, rr.ResourceName
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeBroker:
			// No broker configs are exposed; an empty answer, as tools
			// listing them expect.
		case kmsg.ConfigResourceTypeTopic:
			t, err := s.topics.lookup(ctx, rr.ResourceName)
			if err == nil && !s.allowed(ctx, OpDescribe, ResourceTopic, rr.ResourceName) {
				err = errTopicDenied
			}
			var info parkway.TopicInfo
			if err == nil {
				if info, err = s.node.Admin().TopicInfo(ctx, t); err != nil {
					s.topics.forget(t, err)
				}
			}
			if err != nil {
				dr.ErrorCode = s.topicErrorCode(kmsg.DescribeConfigs, err)
				break
			}
			dr.Configs = describeTopicConfig(info.Config, rr.ConfigNames)
		default:
			dr.ErrorCode = s.code(kmsg.DescribeConfigs, kerr.InvalidRequest.Code)
		}
		resp.Resources = append(resp.Resources, dr)
	}
	return resp
}

func describeTopicConfig(c parkway.TopicConfig, names []string) []kmsg.DescribeConfigsResponseResourceConfig {
	var out []kmsg.DescribeConfigsResponseResourceConfig
	add := func(name, value string, set bool, typ kmsg.ConfigType, readOnly bool) {
		if names != nil && !slices.Contains(names, name) {
			return
		}
		dc := kmsg.NewDescribeConfigsResponseResourceConfig()
		dc.Name, dc.Value, dc.ConfigType, dc.ReadOnly = name, &value, typ, readOnly
		dc.IsDefault, dc.Source = !set, kmsg.ConfigSourceDefaultConfig
		if set {
			dc.Source = kmsg.ConfigSourceDynamicTopicConfig
		}
		out = append(out, dc)
	}
	limit := func(n int64) string {
		if n <= 0 {
			return "-1"
		}
		return strconv.FormatInt(n, 10)
	}
	add(cfgRetentionMs, limit(c.RetentionAge.Milliseconds()), c.RetentionAge > 0, kmsg.ConfigTypeLong, false)
	add(cfgRetentionBytes, limit(c.RetentionBytes), c.RetentionBytes > 0, kmsg.ConfigTypeLong, false)
	add(cfgCleanupPolicy, "delete", false, kmsg.ConfigTypeString, true)
	add(cfgFsync, c.Fsync.String(), c.Fsync != parkway.FsyncDefault, kmsg.ConfigTypeString, false)
	add(cfgFsyncInterval, strconv.FormatInt(c.FsyncInterval.Milliseconds(), 10), c.FsyncInterval > 0, kmsg.ConfigTypeLong, false)
	return out
}

// incrementalAlterConfigs sets or deletes topic configs (SetTopicConfig);
// appending to and subtracting from lists does not apply to any of them.
func (s *Server) incrementalAlterConfigs(ctx context.Context, r *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	ctx, cancel := s.requestContext(ctx, 0)
	defer cancel()
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range r.Resources {
		ar := kmsg.NewIncrementalAlterConfigsResponseResource()
		ar.ResourceType, ar.ResourceName = rr.ResourceType, rr.ResourceName
		fail := func(code int16, msg string) {
			ar.ErrorCode = s.code(kmsg.IncrementalAlterConfigs, code)
			ar.ErrorMessage = &msg
		}
		if rr.ResourceType != kmsg.ConfigResourceTypeTopic {
			fail(kerr.InvalidRequest.Code, "only topic configs can be altered")
			resp.Resources = append(resp.Resources, ar)
			continue
		}
		t, err := s.topics.lookupFresh(ctx, rr.ResourceName)
		if err == nil && !s.allowed(ctx, OpAlter, ResourceTopic, rr.ResourceName) {
			err = errTopicDenied
		}
		var info parkway.TopicInfo
		if err == nil {
			info, err = s.node.Admin().TopicInfo(ctx, t)
		}
		if err != nil {
			fail(s.topicErrorCode(kmsg.IncrementalAlterConfigs, err), err.Error())
			resp.Resources = append(resp.Resources, ar)
			continue
		}
		c := info.Config
		var cfgErr error
		for _, rc := range rr.Configs {
			switch rc.Op {
			case kmsg.IncrementalAlterConfigOpSet, kmsg.IncrementalAlterConfigOpDelete:
				cfgErr = setTopicConfig(&c, rc.Name, rc.Value, rc.Op == kmsg.IncrementalAlterConfigOpDelete)
			default:
				cfgErr = fmt.Errorf("%s: only set and delete apply", rc.Name)
			}
			if cfgErr != nil {
				break
			}
		}
		switch {
		case cfgErr != nil:
			fail(kerr.InvalidConfig.Code, cfgErr.Error())
		case r.ValidateOnly:
		default:
			if err := s.node.Admin().SetTopicConfig(ctx, t, c); err != nil {
				fail(errorCode(err), err.Error())
			}
		}
		resp.Resources = append(resp.Resources, ar)
	}
	return resp
}
