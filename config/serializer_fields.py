"""Text fields that take text only. DRF turns a JSON number sent for a text
field into its digits; the schema says string, so a number (or any other
non-string) sent for text is a 400. Every input serializer of the project uses
these (ModelSerializers through ``StrictModelSerializer``'s field mapping)."""

from __future__ import annotations

from django.db import models
from rest_framework import serializers


class _StringsOnly:
    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class TextField(_StringsOnly, serializers.CharField):
    pass


class EmailField(_StringsOnly, serializers.EmailField):
    pass


class PatternField(_StringsOnly, serializers.RegexField):
    pass


class StrictModelSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose text columns become ``TextField``s."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: TextField,
        models.TextField: TextField,
        models.EmailField: EmailField,
        models.SlugField: TextField,
    }
