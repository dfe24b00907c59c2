"""How directory groups meet the group mappings (ldap_backend.mapping_names): by DN or by cn,
without regard to case or the spacing inside a DN."""

from __future__ import annotations

from fairness.models import Account, GroupMapping
from fairness.portal.signin.ldap_backend import mapping_names

NLP_DN = "cn=nlp-lab,ou=groups,dc=uni,dc=example"


def test_a_mapping_matches_a_group_by_its_dn_or_its_cn_whatever_the_case_or_spacing(tiers):
    tier = tiers["interactive"]
    for group, account in (("CN=NLP-Lab, OU=Groups, DC=uni, DC=example", "nlp"), ("Vision-Lab", "vision"),
                           ("cn=other,ou=groups,dc=uni,dc=example", "other")):
        GroupMapping.objects.create(group=group, account=Account.objects.create(name=account), tier=tier)

    matched = mapping_names([NLP_DN, "cn=vision-lab,ou=groups,dc=uni,dc=example"], ["nlp-lab", "vision-lab"])

    assert sorted(matched) == ["CN=NLP-Lab, OU=Groups, DC=uni, DC=example", "Vision-Lab"]


def test_a_cn_alone_does_not_match_a_mapping_by_dn_elsewhere(tiers):
    GroupMapping.objects.create(group=NLP_DN, account=Account.objects.create(name="nlp"), tier=tiers["interactive"])
    assert mapping_names(["cn=nlp-lab,ou=old,dc=uni,dc=example"], ["nlp-lab"]) == []
